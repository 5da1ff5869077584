package nixgen

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// allowRule is one network.allow entry split into what the guest firewall
// can match. Exactly one of Host and CIDR is set. Host is a DNS name, a
// "*.domain" wildcard or "*" (anywhere); the guest cannot resolve names when
// its image is built, so a Host rule opens its port to every address and the
// host-side netns filter is what pins the name. Port 0 means any port.
type allowRule struct {
	Host string
	CIDR string
	Port int
}

// hostnameRE is what a host entry may look like once the workflow package has
// normalised it: lowercase labels, optionally behind "*.".
var hostnameRE = lazyRegexp(`^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// parseAllow splits a normalised allow entry (see workflow's network.allow
// forms) into an allowRule. Anything it does not recognise is an error, so a
// value that slipped past validation never reaches the firewall.
func parseAllow(s string) (allowRule, error) {
	fail := func(why string) (allowRule, error) {
		return allowRule{}, fmt.Errorf("network.allow entry %q: %s", s, why)
	}
	if s == "*" {
		return allowRule{Host: "*"}, nil
	}
	var hostPart, portPart string
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return fail("has '[' without ']'")
		}
		hostPart = s[1:end]
		rest := s[end+1:]
		if rest != "" {
			p, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return fail("has text after ']' that is not :PORT")
			}
			portPart = p
		}
		if !strings.Contains(hostPart, ":") {
			return fail("brackets hold an IPv6 address")
		}
	case strings.Count(s, ":") > 1:
		hostPart = s // a bare IPv6 address or prefix, no port
	default:
		var found bool
		hostPart, portPart, found = strings.Cut(s, ":")
		if found && portPart == "" {
			return fail("has an empty port")
		}
	}
	r := allowRule{}
	if portPart != "" {
		n, err := strconv.Atoi(portPart)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != portPart {
			return fail("port is not a number from 1 to 65535")
		}
		r.Port = n
	}
	if p, err := netip.ParsePrefix(hostPart); err == nil {
		if p.Masked() != p {
			return fail("prefix has host bits set")
		}
		r.CIDR = p.String()
		return r, nil
	}
	if a, err := netip.ParseAddr(hostPart); err == nil {
		if a.Zone() != "" {
			return fail("address has a zone")
		}
		r.CIDR = netip.PrefixFrom(a, a.BitLen()).String()
		return r, nil
	}
	if len(hostPart) > 253 || !hostnameRE().MatchString(hostPart) {
		return fail("is neither an address, a CIDR prefix nor a lowercase host name")
	}
	r.Host = hostPart
	return r, nil
}
