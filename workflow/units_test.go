package workflow

import "testing"

func TestUnits(t *testing.T) {
	sizes := map[string]int64{"512MiB": 512 << 20, "2GiB": 2 << 30, "1G": 1e9, "1g": 1e9, "100mb": 100e6, "3Ki": 3072, "7B": 7, "1 TiB": 1 << 40, "2Gi": 2 << 30}
	for s, want := range sizes {
		if got, err := ParseSize(s); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "512", "MiB", "1.5GiB", "-1GiB", "1XB", "99999999999999999999B", "9999999999TiB"} {
		if got, err := ParseSize(s); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", s, got)
		}
	}
	rates := map[string]int64{"10Mbit": 10e6, "1Gbit": 1e9, "500kbit": 500e3, "64bit": 64, "1mbit": 1e6}
	for s, want := range rates {
		if got, err := ParseBandwidth(s); err != nil || got != want {
			t.Errorf("ParseBandwidth(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"10", "10Mbps", "10MiB", "fast"} {
		if _, err := ParseBandwidth(s); err == nil {
			t.Errorf("ParseBandwidth(%q) accepted", s)
		}
	}
	durs := map[string]int64{"90s": 90000, "30m": 1800000, "1h30m": 5400000, "250ms": 250, "1.5h": 5400000}
	for s, want := range durs {
		if got, err := ParseTimeout(s); err != nil || got != want {
			t.Errorf("ParseTimeout(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "90", "0s", "-1s", "+1s", "1d", "10us", "1.5ms", "1h-5m"} {
		if got, err := ParseTimeout(s); err == nil {
			t.Errorf("ParseTimeout(%q) = %d, want an error", s, got)
		}
	}
	fmts := map[int64]string{512 << 20: "512MiB", 2 << 30: "2GiB", 1e9: "1G", 7: "7B", 0: "0B"}
	for b, want := range fmts {
		if got := FormatSize(b); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", b, got, want)
		}
	}
	if got := FormatBandwidth(10e6); got != "10Mbit" {
		t.Errorf("FormatBandwidth = %q", got)
	}
	if got := FormatTimeout(5400000); got != "1h30m0s" {
		t.Errorf("FormatTimeout = %q", got)
	}
}

func TestNormalizeAllow(t *testing.T) {
	good := map[string]string{
		"*":                   "*",
		"Example.COM":         "example.com",
		"example.com:443":     "example.com:443",
		"*.example.com:443":   "*.example.com:443",
		"10.0.0.0/8":          "10.0.0.0/8",
		"10.0.0.0/8:5432":     "10.0.0.0/8:5432",
		"192.168.1.1:22":      "192.168.1.1:22",
		"[2001:DB8::1]:443":   "[2001:db8::1]:443",
		"2001:db8:0::/32":     "2001:db8::/32",
		"[2001:db8::/32]:443": "[2001:db8::/32]:443",
		"2001:db8::1":         "2001:db8::1",
		"localhost:65535":     "localhost:65535",
	}
	for in, want := range good {
		if got, err := normalizeAllow(in); err != nil || got != want {
			t.Errorf("normalizeAllow(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "host:0", "host:65536", "host:08", "host:", ":80", "10.0.0.1/8", "1.2.3", "[1.2.3.4]:80",
		"[::1", "[::1]x", "a_b.com", "-a.com", "a..com", "fe80::1%eth0", "*.", "ex ample.com", "host:80:90"} {
		if got, err := normalizeAllow(in); err == nil {
			t.Errorf("normalizeAllow(%q) = %q, want an error", in, got)
		}
	}
}

func TestSuggest(t *testing.T) {
	keys := []string{"resources", "network", "run", "needs"}
	for in, want := range map[string]string{"reources": "resources", "netwrok": "network", "Run": "run", "need": "needs"} {
		if got := suggest(in, keys); got != ` (did you mean "`+want+`"?)` {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
	if got := suggest("zzzzzz", keys); got != "" {
		t.Errorf("suggest(zzzzzz) = %q", got)
	}
}

func TestNamePredicates(t *testing.T) {
	for s, want := range map[string]bool{"A": true, "_x1": true, "PATH": true, "1A": false, "A-B": false, "": false, "a b": false} {
		if isEnvName(s) != want {
			t.Errorf("isEnvName(%q) = %v", s, !want)
		}
	}
	for s, want := range map[string]bool{"python3": true, "python3Packages.numpy": true, "python3Packages.scikit-learn": true, "_1password": true,
		"a..b": false, ".a": false, "a.": false, "1a": false, "a.-b": false, "a==1": false, "": false, "a.${x}": false} {
		if isAttrPath(s) != want {
			t.Errorf("isAttrPath(%q) = %v", s, !want)
		}
	}
}

func TestIORate(t *testing.T) {
	good := map[string]int64{"100MiB/s": 100 << 20, "50MB/s": 50e6, "1GiB/s": 1 << 30, "1gib/S": 1 << 30, " 4 KiB/s ": 4 << 10, "512B/s": 512}
	for s, want := range good {
		if got, err := ParseIORate(s); err != nil || got != want {
			t.Errorf("ParseIORate(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	bad := map[string]string{
		"100MiB":          `"100MiB" is a size, not a rate; write it like 100MiB/s, 50MB/s or 1GiB/s (did you mean "100MiB/s"?)`,
		"100MBps":         `"100MBps" is not a rate this format knows; write it like 100MiB/s, 50MB/s or 1GiB/s (did you mean "100MB/s"?)`,
		"100MiB/sec":      `"100MiB/sec" is not a rate this format knows; write it like 100MiB/s, 50MB/s or 1GiB/s (did you mean "100MiB/s"?)`,
		"100Mbps":         `"100Mbps" is not a rate of bytes per second; write it like 100MiB/s, 50MB/s or 1GiB/s`,
		"10Mbit/s":        `"10Mbit/s" has an unknown unit "Mbit"; write it like 100MiB/s, 50MB/s or 1GiB/s`,
		"100/s":           `"100/s" has no unit; write it like 100MiB/s, 50MB/s or 1GiB/s`,
		"100":             `"100" has no unit; write it like 100MiB/s, 50MB/s or 1GiB/s`,
		"1.5MiB/s":        `"1.5MiB/s" is not a whole number; use a smaller unit (1.5GiB is 1536MiB); write it like 100MiB/s, 50MB/s or 1GiB/s`,
		"fast":            `"fast" is not a rate of bytes per second; write it like 100MiB/s, 50MB/s or 1GiB/s`,
		"/s":              `"/s" does not start with a whole number; write it like 100MiB/s, 50MB/s or 1GiB/s`,
		"9999999999TiB/s": `"9999999999TiB/s" is too large`,
	}
	for s, want := range bad {
		if got, err := ParseIORate(s); err == nil || err.Error() != want {
			t.Errorf("ParseIORate(%q) = %d, %v; want error %s", s, got, err, want)
		}
	}
	for bps, want := range map[int64]string{0: "unlimited", 100 << 20: "100MiB/s", 50e6: "50M/s"} {
		if got := FormatIORate(bps); got != want {
			t.Errorf("FormatIORate(%d) = %q, want %q", bps, got, want)
		}
	}
}
