package workflow

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Size units. K, M, G, T (and KB, MB, ...) are powers of 1000; Ki, Mi, Gi,
// Ti (and KiB, MiB, ...) powers of 1024, as in Kubernetes. Units are not
// case-sensitive: 512mib is 512MiB.
var sizeUnits = map[string]int64{
	"b": 1,
	"k": 1e3, "kb": 1e3, "ki": 1 << 10, "kib": 1 << 10,
	"m": 1e6, "mb": 1e6, "mi": 1 << 20, "mib": 1 << 20,
	"g": 1e9, "gb": 1e9, "gi": 1 << 30, "gib": 1 << 30,
	"t": 1e12, "tb": 1e12, "ti": 1 << 40, "tib": 1 << 40,
}

// Bandwidth units, bits per second, powers of 1000 as in tc(8).
var bandwidthUnits = map[string]int64{
	"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
}

var errNoUnit = errors.New("no unit")

// splitQuantity splits "512MiB" into 512 and "MiB".
func splitQuantity(s string) (int64, string, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, "", errors.New("does not start with a whole number")
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, "", errors.New("is too large")
	}
	if i < len(s) && (s[i] == '.' || s[i] == ',') {
		return 0, "", errors.New("is not a whole number; use a smaller unit (1.5GiB is 1536MiB)")
	}
	unit := strings.TrimSpace(s[i:])
	if unit == "" {
		return n, "", errNoUnit
	}
	return n, unit, nil
}

func parseQuantity(s string, units map[string]int64, example string) (int64, error) {
	return parseQuantityOf(s, s, units, example)
}

// parseQuantityOf parses q, a part of s; messages quote all of s.
func parseQuantityOf(s, q string, units map[string]int64, example string) (int64, error) {
	n, unit, err := splitQuantity(q)
	if errors.Is(err, errNoUnit) {
		return 0, fmt.Errorf("%q has no unit; write it like %s", s, example)
	}
	if err != nil {
		return 0, fmt.Errorf("%q %v; write it like %s", s, err, example)
	}
	mul, ok := units[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("%q has an unknown unit %q; write it like %s", s, unit, example)
	}
	if n > math.MaxInt64/mul {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * mul, nil
}

// ParseSize parses a byte size such as "512MiB", "2GiB" or "1G".
func ParseSize(s string) (int64, error) {
	return parseQuantity(s, sizeUnits, "512MiB, 2GiB or 1G")
}

// ParseBandwidth parses a rate such as "10Mbit", "1Gbit" or "500kbit" into
// bits per second.
func ParseBandwidth(s string) (int64, error) {
	return parseQuantity(s, bandwidthUnits, "500kbit, 10Mbit or 1Gbit")
}

// ioRateExample is how ParseIORate's messages say to write a rate.
const ioRateExample = "100MiB/s, 50MB/s or 1GiB/s"

// ParseIORate parses a disk IO rate such as "100MiB/s", "50MB/s" or
// "1GiB/s" into bytes per second: a size (see ParseSize) and "/s".
func ParseIORate(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if size, ok := cutSuffixFold(t, "/s"); ok {
		return parseQuantityOf(s, size, sizeUnits, ioRateExample)
	}
	// Other ways of writing "per second" get the spelling to use. ("Mbps"
	// is megabits, so "ps" only after a capital B: "MBps", "MiBps".)
	var size string
	if pre, ok := cutSuffixFold(t, "/sec"); ok {
		size = pre
	} else if pre, ok := cutSuffixFold(t, "/second"); ok {
		size = pre
	} else if pre, ok := strings.CutSuffix(t, "Bps"); ok {
		size = pre + "B"
	}
	if _, err := ParseSize(size); size != "" && err == nil {
		return 0, fmt.Errorf("%q is not a rate this format knows; write it like %s (did you mean %q?)", s, ioRateExample, strings.TrimSpace(size)+"/s")
	}
	if _, err := ParseSize(t); err == nil {
		return 0, fmt.Errorf("%q is a size, not a rate; write it like %s (did you mean %q?)", s, ioRateExample, t+"/s")
	}
	if _, _, err := splitQuantity(t); errors.Is(err, errNoUnit) {
		return 0, fmt.Errorf("%q has no unit; write it like %s", s, ioRateExample)
	}
	return 0, fmt.Errorf("%q is not a rate of bytes per second; write it like %s", s, ioRateExample)
}

// cutSuffixFold is strings.CutSuffix, ignoring case.
func cutSuffixFold(s, suffix string) (string, bool) {
	if len(s) >= len(suffix) && strings.EqualFold(s[len(s)-len(suffix):], suffix) {
		return s[:len(s)-len(suffix)], true
	}
	return s, false
}

// ParseTimeout parses a positive duration such as "90s", "30m" or "1h30m"
// (units h, m, s, ms) into milliseconds.
func ParseTimeout(s string) (int64, error) {
	const example = "90s, 30m or 1h30m"
	t := strings.TrimSpace(s)
	if t != "" && strings.Trim(t, "0123456789") == "" {
		return 0, fmt.Errorf("%q has no unit; write it like %s", s, example)
	}
	if strings.ContainsAny(t, "+-") {
		return 0, fmt.Errorf("%q is not a positive duration; write it like %s", s, example)
	}
	for _, u := range []string{"ns", "us", "µs", "μs"} {
		if strings.Contains(t, u) {
			return 0, fmt.Errorf("%q is finer than a millisecond; use h, m, s or ms", s)
		}
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration; write it like %s", s, example)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration; write it like %s", s, example)
	}
	if d%time.Millisecond != 0 {
		return 0, fmt.Errorf("%q is finer than a millisecond", s)
	}
	return d.Milliseconds(), nil
}

// FormatSize spells bytes in the largest unit that divides them exactly,
// preferring powers of 1024: 536870912 is "512MiB", 1e9 is "1G".
func FormatSize(b int64) string {
	if b == 0 {
		return "0B"
	}
	for _, u := range []struct {
		n string
		v int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"T", 1e12}, {"G", 1e9}, {"M", 1e6}, {"K", 1e3}} {
		if b%u.v == 0 {
			return strconv.FormatInt(b/u.v, 10) + u.n
		}
	}
	return strconv.FormatInt(b, 10) + "B"
}

// FormatBandwidth spells bits per second like "10Mbit"; 0 is "unlimited".
func FormatBandwidth(bps int64) string {
	if bps == 0 {
		return "unlimited"
	}
	for _, u := range []struct {
		n string
		v int64
	}{{"Tbit", 1e12}, {"Gbit", 1e9}, {"Mbit", 1e6}, {"kbit", 1e3}} {
		if bps%u.v == 0 {
			return strconv.FormatInt(bps/u.v, 10) + u.n
		}
	}
	return strconv.FormatInt(bps, 10) + "bit"
}

// FormatIORate spells bytes per second like "100MiB/s"; 0 is "unlimited".
func FormatIORate(bps int64) string {
	if bps == 0 {
		return "unlimited"
	}
	return FormatSize(bps) + "/s"
}

// FormatTimeout spells milliseconds like "1h30m0s"; 0 is "none".
func FormatTimeout(ms int64) string {
	if ms == 0 {
		return "none"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}
