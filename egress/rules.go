package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is one network entry in the canonical spelling workflow.Parse
// gives it: "host", "host:port", "*.domain[:port]", an address, a CIDR
// prefix, "CIDR:port", "[IPv6]:port" or "[IPv6/len]:port".
type Rule struct {
	// Entry is the rule as written (canonical): what audit lines and
	// hints name.
	Entry string
	// Host is a lowercase DNS name. With Wildcard set it is the domain
	// under "*.", and the rule matches names strictly below it.
	Host     string
	Wildcard bool
	// Prefix is set for address and CIDR rules (a single address is a
	// full-length prefix).
	Prefix netip.Prefix
	// Port is the one port allowed; 0 allows any.
	Port uint16
}

// IsCIDR reports whether the rule is an address or a prefix rather than a name.
func (r Rule) IsCIDR() bool { return r.Prefix.IsValid() }

// ParseRule reads one canonical network entry. "*" (open egress) is not a
// rule this package enforces: policy refuses it by default, and a policy
// that admits it is asking for something egress does not offer.
func ParseRule(entry string) (Rule, error) {
	if entry == "*" {
		return Rule{}, errors.New(`"*" (all egress) cannot be enforced by the egress proxy; list the hosts or prefixes the step needs`)
	}
	r := Rule{Entry: entry}
	hostPart, portPart, hasPort := entry, "", false
	if strings.HasPrefix(entry, "[") {
		end := strings.IndexByte(entry, ']')
		if end < 0 {
			return Rule{}, fmt.Errorf("network entry %q: '[' without ']'", entry)
		}
		hostPart = entry[1:end]
		rest := entry[end+1:]
		if rest != "" {
			p, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return Rule{}, fmt.Errorf("network entry %q: text after ']' is not :PORT", entry)
			}
			portPart, hasPort = p, true
		}
	} else if strings.Count(entry, ":") == 1 {
		hostPart, portPart, hasPort = strings.Cut(entry, ":")
	}
	if hasPort {
		// An empty port is an error, not "any port": leave out the ':'.
		n, err := strconv.ParseUint(portPart, 10, 16)
		if err != nil || n == 0 {
			return Rule{}, fmt.Errorf("network entry %q: port %q is not 1-65535", entry, portPart)
		}
		r.Port = uint16(n)
	}
	if p, err := netip.ParsePrefix(hostPart); err == nil {
		r.Prefix = p.Masked()
		return r, nil
	}
	if a, err := netip.ParseAddr(hostPart); err == nil {
		r.Prefix = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		return r, nil
	}
	h := strings.ToLower(hostPart)
	if rest, ok := strings.CutPrefix(h, "*."); ok {
		r.Wildcard = true
		h = rest
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" || strings.ContainsAny(h, "*/ :[]") {
		return Rule{}, fmt.Errorf("network entry %q: %q is not a host name, address or prefix", entry, hostPart)
	}
	r.Host = h
	return r, nil
}

// matchName reports whether the rule allows the lowercase name (no
// trailing dot).
func (r Rule) matchName(name string) bool {
	if r.Host == "" || name == "" {
		return false
	}
	if r.Wildcard {
		return strings.HasSuffix(name, "."+r.Host)
	}
	return name == r.Host
}

func (r Rule) matchPort(port uint16) bool { return r.Port == 0 || r.Port == port }

// Rules are one step's egress rules: what it may reach (Allow, from
// network.allow) and what the policy forbids whatever a step asks
// (Deny, from data.agentsandbox.egress_deny).
type Rules struct {
	Allow []Rule
	Deny  []Rule
}

// NewRules parses the step's allow entries and the policy's deny entries.
func NewRules(allow, deny []string) (*Rules, error) {
	rs := &Rules{}
	for _, e := range allow {
		r, err := ParseRule(e)
		if err != nil {
			return nil, err
		}
		rs.Allow = append(rs.Allow, r)
	}
	for _, e := range deny {
		r, err := ParseRule(e)
		if err != nil {
			return nil, fmt.Errorf("policy data agentsandbox.egress_deny: %w", err)
		}
		rs.Deny = append(rs.Deny, r)
	}
	return rs, nil
}

// NameSource says where the proxy learned the name of a connection.
type NameSource string

const (
	FromNone    NameSource = ""
	FromDNS     NameSource = "dns"     // the step's resolver handed out the address
	FromSNI     NameSource = "sni"     // TLS ClientHello server_name
	FromHost    NameSource = "host"    // HTTP/1 Host header
	FromConnect NameSource = "connect" // HTTP CONNECT or absolute-form request to the proxy endpoint
)

// Request is what is known about one connection when it is decided.
type Request struct {
	// Name is the DNS name the job asked for, lowercase, "" when unknown.
	Name       string
	NameSource NameSource
	// Addr and Port are the original destination. Addr is the zero
	// Addr when the job gave only a name (the proxy endpoint), or one
	// of the resolver's private addresses.
	Addr netip.Addr
	Port uint16
}

// Decision is the verdict on one connection.
type Decision struct {
	Allow bool `json:"allow"`
	// Rule is the entry that decided: an allow rule, a deny rule, or ""
	// for the default deny.
	Rule string `json:"rule,omitempty"`
	// Reason says why in words a person can act on.
	Reason string `json:"reason"`
	// Hint, on a default deny, is the network.allow entry that would
	// allow this connection.
	Hint string `json:"hint,omitempty"`
}

// Verdict strings for audit lines.
func (d Decision) Verdict() string {
	if d.Allow {
		return "allow"
	}
	return "deny"
}

// Decide judges one connection by the order in the package doc.
func (rs *Rules) Decide(q Request) Decision {
	name := strings.TrimSuffix(strings.ToLower(q.Name), ".")
	addr := q.Addr.Unmap()
	for _, r := range rs.Deny {
		if !r.matchPort(q.Port) {
			continue
		}
		if (r.IsCIDR() && addr.IsValid() && r.Prefix.Contains(addr)) || r.matchName(name) || (r.Wildcard && name == r.Host) {
			return Decision{Rule: r.Entry, Reason: fmt.Sprintf("%s is forbidden by the policy (data.agentsandbox.egress_deny %q); no network.allow entry can open it", target(q), r.Entry)}
		}
	}
	// A name counts only when the job gave no address (the proxy
	// endpoint) or the step's resolver gave the address for it; an
	// address the job dialled itself is judged by CIDR rules alone.
	if name != "" && (!addr.IsValid() || IsResolverAddr(addr)) {
		for _, r := range rs.Allow {
			if !r.IsCIDR() && !r.Wildcard && r.matchName(name) && r.matchPort(q.Port) {
				return Decision{Allow: true, Rule: r.Entry, Reason: fmt.Sprintf("network.allow %q", r.Entry)}
			}
		}
		for _, r := range rs.Allow {
			if r.Wildcard && r.matchName(name) && r.matchPort(q.Port) {
				return Decision{Allow: true, Rule: r.Entry, Reason: fmt.Sprintf("network.allow %q", r.Entry)}
			}
		}
	}
	if addr.IsValid() && q.NameSource != FromDNS {
		for _, r := range rs.Allow {
			if r.IsCIDR() && r.Prefix.Contains(addr) && r.matchPort(q.Port) {
				return Decision{Allow: true, Rule: r.Entry, Reason: fmt.Sprintf("network.allow %q", r.Entry)}
			}
		}
	}
	d := Decision{Hint: rs.hint(q, name, addr)}
	d.Reason = fmt.Sprintf("no network.allow entry matches %s; to allow it, add %q to the step's network.allow", target(q), d.Hint)
	if name != "" && q.NameSource != FromDNS && addr.IsValid() && !IsResolverAddr(addr) {
		// The job dialled an address and claims a name: names count only
		// when the step's resolver gave the address.
		d.Reason = fmt.Sprintf("no network.allow entry matches %s (the name %q came from %s, and a connection to an address the step's resolver did not give is judged by its address alone); to allow it, add %q to the step's network.allow", target(q), name, q.NameSource, d.Hint)
	}
	return d
}

// hint is the smallest network.allow entry that would allow q.
func (rs *Rules) hint(q Request, name string, addr netip.Addr) string {
	h := name
	if h == "" || (q.NameSource != FromDNS && q.NameSource != FromConnect && addr.IsValid() && !IsResolverAddr(addr)) {
		if !addr.IsValid() {
			return ""
		}
		h = addr.String()
		if addr.Is6() {
			if q.Port == 0 {
				return h
			}
			return "[" + h + "]:" + strconv.Itoa(int(q.Port))
		}
	}
	if q.Port == 0 {
		return h
	}
	return h + ":" + strconv.Itoa(int(q.Port))
}

func target(q Request) string {
	var s string
	switch {
	case q.Name != "" && q.Addr.IsValid() && !IsResolverAddr(q.Addr):
		s = fmt.Sprintf("%s (%s)", q.Addr, q.Name)
	case q.Name != "":
		s = q.Name
	case q.Addr.IsValid():
		s = q.Addr.String()
	default:
		s = "(unknown destination)"
	}
	if q.Port != 0 {
		s += " port " + strconv.Itoa(int(q.Port))
	}
	return s
}

// Resolves reports whether the step's resolver answers name: an allow
// rule names it (exactly or below a wildcard) and no deny rule does.
// Every other name gets NXDOMAIN.
func (rs *Rules) Resolves(name string) bool {
	_, ok := rs.ResolveRule(name)
	return ok
}

// ResolveRule is Resolves with the entry that decided: the deny rule that
// names name (ok false), else the allow rule that names it, an exact one
// before a wildcard (ok true), else the zero Rule (ok false).
func (rs *Rules) ResolveRule(name string) (r Rule, ok bool) {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	for _, r := range rs.Deny {
		if r.matchName(name) || (r.Wildcard && name == r.Host) {
			return r, false
		}
	}
	for _, r := range rs.Allow {
		if !r.Wildcard && r.matchName(name) {
			return r, true
		}
	}
	for _, r := range rs.Allow {
		if r.Wildcard && r.matchName(name) {
			return r, true
		}
	}
	return Rule{}, false
}

// CheckUpstream judges an address the proxy is about to dial for an
// allowed connection (after its own resolution of the name, at dial
// time). Addresses in a special range are refused unless an allow CIDR
// rule that lies inside that range contains them; a forbidden range is
// refused always.
func (rs *Rules) CheckUpstream(a netip.Addr) error {
	a = a.Unmap()
	for _, r := range rs.Deny {
		if r.IsCIDR() && r.Prefix.Contains(a) {
			return fmt.Errorf("upstream address %s is forbidden by the policy (data.agentsandbox.egress_deny %q)", a, r.Entry)
		}
	}
	if nat64.Contains(a) {
		// A NAT64 gateway on the host's network would carry this to
		// the IPv4 address in its last 32 bits: judge that one too.
		b := a.As16()
		v4 := netip.AddrFrom4([4]byte(b[12:]))
		if err := rs.CheckUpstream(v4); err != nil {
			return fmt.Errorf("upstream address %s is NAT64 for %s: %w", a, v4, err)
		}
	}
	sp, what, ok := SpecialRange(a)
	if !ok {
		return nil
	}
	for _, r := range rs.Allow {
		if r.IsCIDR() && r.Prefix.Contains(a) && sp.Bits() <= r.Prefix.Bits() && sp.Contains(r.Prefix.Addr()) {
			return nil
		}
	}
	return fmt.Errorf("upstream address %s is %s (%s); it is refused unless a network.allow CIDR inside %s names it", a, what, sp, sp)
}

// nat64 is the well-known NAT64 prefix (RFC 6052).
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

type special struct {
	prefix netip.Prefix
	what   string
}

var specials = func() []special {
	var out []special
	for _, s := range []struct{ p, what string }{
		{"0.0.0.0/8", "an unspecified or \"this network\" address"},
		{"10.0.0.0/8", "a private address"},
		{"100.64.0.0/10", "a shared (carrier-grade NAT) address"},
		{"127.0.0.0/8", "a loopback address"},
		{"169.254.0.0/16", "a link-local address (cloud metadata services live here)"},
		{"172.16.0.0/12", "a private address"},
		{"192.0.0.0/24", "an IETF protocol assignment"},
		{"192.168.0.0/16", "a private address"},
		{"198.18.0.0/15", "a benchmarking address (the step resolvers' private range)"},
		{"224.0.0.0/4", "a multicast address"},
		{"240.0.0.0/4", "a reserved address"},
		{"::/128", "the unspecified address"},
		{"::1/128", "the loopback address"},
		{"64:ff9b:1::/48", "a local-use NAT64 address"},
		{"fc00::/7", "a unique local (private) address"},
		{"fe80::/10", "a link-local address"},
		{"ff00::/8", "a multicast address"},
	} {
		out = append(out, special{netip.MustParsePrefix(s.p), s.what})
	}
	return out
}()

// SpecialRange reports the special range a lies in, if any, and what it is.
func SpecialRange(a netip.Addr) (netip.Prefix, string, bool) {
	a = a.Unmap()
	for _, s := range specials {
		if s.prefix.Contains(a) {
			return s.prefix, s.what, true
		}
	}
	return netip.Prefix{}, "", false
}
