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
// network.allow), what the policy forbids whatever a step asks (Deny,
// from data.agentsandbox.egress_deny), and the internal addresses the
// operator opens to steps that ask for them (Internal, from
// data.agentsandbox.egress_internal; see CheckUpstream).
type Rules struct {
	Allow    []Rule
	Deny     []Rule
	Internal []Rule
}

// Operator is what the operator's policy data says about every step's
// egress, beyond the step's own network.allow.
type Operator struct {
	// Deny is data.agentsandbox.egress_deny: entries no step reaches.
	Deny []string
	// Internal is data.agentsandbox.egress_internal: addresses and
	// prefixes (with or without a port) of internal destinations that a
	// step whose network.allow asks for them may reach.
	Internal []string
}

// NewRules parses the step's allow entries and the policy's deny entries;
// no internal address is open.
func NewRules(allow, deny []string) (*Rules, error) {
	return Operator{Deny: deny}.Rules(allow)
}

// Rules parses the step's allow entries under the operator's entries.
func (o Operator) Rules(allow []string) (*Rules, error) {
	rs := &Rules{}
	for _, e := range allow {
		r, err := ParseRule(e)
		if err != nil {
			return nil, err
		}
		rs.Allow = append(rs.Allow, r)
	}
	for _, e := range o.Deny {
		r, err := ParseRule(e)
		if err != nil {
			return nil, fmt.Errorf("policy data agentsandbox.egress_deny: %w", err)
		}
		rs.Deny = append(rs.Deny, r)
	}
	for _, e := range o.Internal {
		r, err := ParseInternal(e)
		if err != nil {
			return nil, err
		}
		rs.Internal = append(rs.Internal, r)
	}
	return rs, nil
}

// ParseInternal reads one entry of data.agentsandbox.egress_internal: an
// address or a prefix, with or without a port, as network.allow writes
// them. Names are refused: internal destinations are opened by address.
func ParseInternal(entry string) (Rule, error) {
	r, err := ParseRule(entry)
	if err != nil {
		return Rule{}, fmt.Errorf("policy data agentsandbox.egress_internal: %w", err)
	}
	if !r.IsCIDR() {
		return Rule{}, fmt.Errorf("policy data agentsandbox.egress_internal: %q is a name; list the addresses or prefixes to open, such as \"169.254.169.254:80\" or \"10.20.0.0/16:5432\" (a step reaches a name by its network.allow)", entry)
	}
	return r, nil
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
		if (r.IsCIDR() && addr.IsValid() && containsOrCarried(r.Prefix, addr)) || r.matchName(name) || (r.Wildcard && name == r.Host) {
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

// containsOrCarried reports whether p contains a or an IPv4 address a
// carries (Embedded).
func containsOrCarried(p netip.Prefix, a netip.Addr) bool {
	if p.Contains(a) {
		return true
	}
	for _, c := range Embedded(a) {
		if p.Contains(c.Addr) {
			return true
		}
	}
	return false
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
// time), with host the host's own addresses (nil: not judged). It
// refuses, in this order:
//
//   - an address a forbidden entry (egress_deny) contains, or whose
//     carried IPv4 address (Embedded) one contains;
//   - an internal address (Classify: special ranges, the host's own
//     addresses, and IPv6 forms carrying such an IPv4 address), unless an
//     entry of the operator's egress_internal contains it (each internal
//     address it is or carries) with the port. No network.allow entry
//     opens an internal address: a workflow's and an API client's rules
//     can never reach the host, its loopback, metadata or private
//     networks on their own;
//   - any address when the host's addresses cannot be read.
func (rs *Rules) CheckUpstream(ap netip.AddrPort, host HostAddrs) error {
	a, port := ap.Addr().Unmap().WithZone(""), ap.Port()
	for _, c := range append([]Carried{{Addr: a}}, Embedded(a)...) {
		for _, r := range rs.Deny { // containsOrCarried, saying which
			if r.IsCIDR() && r.matchPort(port) && r.Prefix.Contains(c.Addr) {
				if c.Via != "" {
					return fmt.Errorf("upstream address %s carries %s (%s), which the policy forbids (data.agentsandbox.egress_deny %q)", a, c.Addr, c.Via, r.Entry)
				}
				return fmt.Errorf("upstream address %s is forbidden by the policy (data.agentsandbox.egress_deny %q)", a, r.Entry)
			}
		}
	}
	ins, err := Classify(a, host)
	if err != nil {
		return fmt.Errorf("upstream address %s: %w; refused, since it might be one of them", a, err)
	}
	for _, in := range ins {
		if rs.opensInternal(in.Addr, port) {
			continue
		}
		what := "is " + in.String()
		if in.Via != "" {
			what = fmt.Sprintf("carries %s as %s", in, in.Via)
		}
		return fmt.Errorf("upstream address %s %s; internal addresses are refused unless the operator's policy data opens them (data.agentsandbox.egress_internal), and no network.allow entry can", a, what)
	}
	return nil
}

// opensInternal reports whether an egress_internal entry contains a
// with port.
func (rs *Rules) opensInternal(a netip.Addr, port uint16) bool {
	for _, r := range rs.Internal {
		if r.IsCIDR() && r.matchPort(port) && r.Prefix.Contains(a) {
			return true
		}
	}
	return false
}

// InternalEntry reports whether the CIDR rule r (a network.allow entry)
// names only internal addresses (ClassifyPrefix) that the operator's
// egress_internal entries do not open: such an entry can never be
// reached, and admission refuses it. It reports false for name rules and
// for prefixes that merely overlap an internal range.
func InternalEntry(r Rule, internal []Rule) (Internal, bool) {
	if !r.IsCIDR() {
		return Internal{}, false
	}
	in, judged, ok := classifyPrefix(r.Prefix)
	if !ok {
		return Internal{}, false
	}
	covers := func(o, p netip.Prefix) bool {
		return o.Addr().BitLen() == p.Addr().BitLen() && o.Bits() <= p.Bits() && o.Contains(p.Addr())
	}
	for _, o := range internal {
		if !o.IsCIDR() || (o.Port != 0 && o.Port != r.Port) {
			continue
		}
		// A prefix that carries IPv4 (6to4, NAT64, ...) is also opened
		// by an opening of the IPv4 prefix it carries.
		if covers(o.Prefix, r.Prefix) || covers(o.Prefix, judged) {
			return Internal{}, false
		}
	}
	return in, true
}
