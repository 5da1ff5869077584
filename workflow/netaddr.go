package workflow

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// normalizeAllow checks one network.allow entry and returns its canonical
// spelling. Accepted forms: "*", "host", "host:port", "*.domain[:port]",
// "CIDR", "CIDR:port", an IP, "IPv4:port", "[IPv6]:port", "[IPv6/len]:port"
// and bare IPv6 addresses or prefixes. Ports are 1-65535. Whether an entry
// is permitted is policy's decision, not this package's.
func normalizeAllow(s string) (string, error) {
	if s == "*" {
		return s, nil
	}
	if s == "" {
		return "", errors.New("is empty")
	}
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", errors.New("has '[' without a closing ']'")
		}
		inner, rest := s[1:end], s[end+1:]
		ip, err := normalizeIP(inner)
		if err != nil {
			return "", err
		}
		if !strings.Contains(ip, ":") {
			return "", errors.New("brackets are for IPv6 addresses; write an IPv4 address without them")
		}
		if rest == "" {
			return ip, nil
		}
		port, ok := strings.CutPrefix(rest, ":")
		if !ok {
			return "", errors.New("has text after ']' that is not :PORT")
		}
		if err := checkPort(port); err != nil {
			return "", err
		}
		return "[" + ip + "]:" + port, nil
	}
	if strings.Count(s, ":") > 1 {
		ip, err := normalizeIP(s)
		if err != nil {
			return "", fmt.Errorf("%w; an IPv6 address with a port is written [ADDRESS]:PORT", err)
		}
		return ip, nil
	}
	host, port, hasPort := strings.Cut(s, ":")
	if hasPort {
		if err := checkPort(port); err != nil {
			return "", err
		}
	}
	var h string
	if strings.Contains(host, "/") || looksNumeric(host) {
		ip, err := normalizeIP(host)
		if err != nil {
			return "", err
		}
		h = ip
	} else {
		var err error
		if h, err = normalizeHostname(host); err != nil {
			return "", err
		}
	}
	if hasPort {
		return h + ":" + port, nil
	}
	return h, nil
}

func looksNumeric(s string) bool {
	return s != "" && strings.Trim(s, "0123456789.") == ""
}

// normalizeIP accepts an address or a prefix whose host bits are zero.
func normalizeIP(s string) (string, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return "", fmt.Errorf("%q is not a valid CIDR prefix", s)
		}
		if p.Masked() != p {
			return "", fmt.Errorf("prefix %q has host bits set; write %s", s, p.Masked())
		}
		return p.String(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return "", fmt.Errorf("%q is not a valid IP address", s)
	}
	return a.String(), nil
}

func checkPort(p string) error {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p {
		return fmt.Errorf("port %q is not a number from 1 to 65535", p)
	}
	return nil
}

// normalizeHostname lowercases a DNS name, optionally "*."-prefixed.
func normalizeHostname(s string) (string, error) {
	h := strings.ToLower(s)
	name := strings.TrimPrefix(h, "*.")
	if name == "" || len(name) > 253 {
		return "", fmt.Errorf("%q is not a valid host name", s)
	}
	for _, label := range strings.Split(name, ".") {
		if !isDNSLabel(label, 63) {
			return "", fmt.Errorf("%q is not a valid host name (labels are letters, digits and '-', not starting or ending with '-')", s)
		}
	}
	return h, nil
}

// isDNSLabel reports whether s is a lowercase RFC 1123 label of at most max bytes.
func isDNSLabel(s string, max int) bool {
	if s == "" || len(s) > max || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
