package egress

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
)

// The addresses of a step's network room. Every step has a network
// namespace of its own, so every step uses the same ones; they come from
// 198.18.0.0/15 (RFC 2544, never routed on the internet) and a unique
// local IPv6 prefix, and never leave the namespace.
var (
	// Gateway is the room's side: the step's resolver listens on it
	// (port 53), and a VM guest routes through it.
	Gateway = netip.MustParseAddr("198.18.0.1")
	// GatewayPrefix is the room's IPv4 link.
	GatewayPrefix = netip.MustParsePrefix("198.18.0.0/24")
	// Guest is a VM guest's address on the tap.
	Guest = netip.MustParseAddr("198.18.0.2")
	// Gateway6 and GatewayPrefix6 are the IPv6 side: a default route, so
	// that an IPv6 connection reaches the firewall and the proxy (which
	// judge it by CIDR rules) instead of failing as unreachable.
	Gateway6       = netip.MustParseAddr("fd61:7362::1")
	GatewayPrefix6 = netip.MustParsePrefix("fd61:7362::/64")
	// MappedPrefix holds the private addresses the resolver gives
	// allowed names: one per name, for the life of the step.
	MappedPrefix = netip.MustParsePrefix("198.19.0.0/16")
)

// IsResolverAddr reports whether a is one the step's resolver hands out.
func IsResolverAddr(a netip.Addr) bool { return MappedPrefix.Contains(a.Unmap()) }

// Mapper gives each name the step's resolver answers a private address
// from MappedPrefix, and tells the proxy which name an address stands
// for. It is safe for concurrent use.
type Mapper struct {
	mu     sync.Mutex
	byName map[string]netip.Addr
	byAddr map[netip.Addr]string
	next   netip.Addr
}

// NewMapper returns an empty mapping.
func NewMapper() *Mapper {
	return &Mapper{byName: map[string]netip.Addr{}, byAddr: map[netip.Addr]string{}, next: MappedPrefix.Addr().Next()}
}

// Map returns the address for name (lowercase, no trailing dot),
// allocating the next free one the first time.
func (m *Mapper) Map(name string) (netip.Addr, error) {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, ok := m.byName[name]; ok {
		return a, nil
	}
	a := m.next
	if !MappedPrefix.Contains(a) || a == lastAddr(MappedPrefix) {
		return netip.Addr{}, fmt.Errorf("the step's resolver has given out all %d of its addresses", len(m.byName))
	}
	m.next = a.Next()
	m.byName[name] = a
	m.byAddr[a] = name
	return a, nil
}

// Name returns the name a was given to, if any.
func (m *Mapper) Name(a netip.Addr) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.byAddr[a.Unmap()]
	return n, ok
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().As16()
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	for i := bits; i < 128; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a := netip.AddrFrom16(b)
	if p.Addr().Is4() {
		return a.Unmap()
	}
	return a
}

// ResolvConf is /etc/resolv.conf for a step with egress: the step's
// resolver alone.
func ResolvConf() string {
	return "nameserver " + Gateway.String() + "\noptions timeout:2 attempts:2\n"
}

// The ways an IPv6 address carries an IPv4 address (Internal.Via).
const (
	ViaMapped       = "IPv4-mapped"
	ViaTranslated   = "IPv4-translated"
	ViaCompatible   = "IPv4-compatible"
	Via6to4         = "6to4"
	ViaTeredoServer = "Teredo (server)"
	ViaTeredoClient = "Teredo (client)"
	ViaNAT64        = "NAT64"
	ViaLocalNAT64   = "local-use NAT64"
)

// HostAddrs knows the host's own addresses: those of every interface of
// the network namespace the proxy dials from. egress/hostaddr reads them
// from the system, kept current.
type HostAddrs interface {
	// HostAddr reports whether a (unmapped, without zone) is one of the
	// host's own addresses. An error means they could not be read; the
	// caller refuses the address.
	HostAddr(a netip.Addr) (bool, error)
}

// Internal says why an address is internal.
type Internal struct {
	// Addr is the address judged internal: the one given, or the IPv4
	// address it carries (Via says how).
	Addr netip.Addr
	// Via is "" when Addr is the address given, else how the given
	// address carries it (ViaMapped, Via6to4, ...).
	Via string
	// Range is the special range Addr lies in; for a host address, Addr
	// alone.
	Range netip.Prefix
	// What says in words what Range is ("a loopback address").
	What string
	// Host is set when Addr is one of the host's own addresses.
	Host bool
}

// String is "127.0.0.1, a loopback address (127.0.0.0/8)", with ", carried
// by 2002:7f00:1::1 (6to4)" when the address was carried.
func (in Internal) String() string {
	s := in.Addr.String() + ", " + in.What
	if !in.Host {
		s += " (" + in.Range.String() + ")"
	}
	return s
}

// carrier is one way an IPv6 address carries an IPv4 address: the
// prefix it lies in and the bit offset of the IPv4 address.
type carrier struct {
	prefix netip.Prefix
	off    int
	invert bool // Teredo obfuscates the client's address
	via    string
}

var carriers = []carrier{
	{netip.MustParsePrefix("::ffff:0:0/96"), 96, false, ViaMapped},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), 96, false, ViaTranslated},
	{netip.MustParsePrefix("::/96"), 96, false, ViaCompatible},
	{netip.MustParsePrefix("2002::/16"), 16, false, Via6to4},
	{netip.MustParsePrefix("2001::/32"), 32, false, ViaTeredoServer},
	{netip.MustParsePrefix("2001::/32"), 96, true, ViaTeredoClient},
	{netip.MustParsePrefix("64:ff9b::/96"), 96, false, ViaNAT64},
	{netip.MustParsePrefix("64:ff9b:1::/48"), 96, false, ViaLocalNAT64},
}

// ipv4At reads the IPv4 address at bit offset off (a multiple of 16) of b.
func ipv4At(b [16]byte, off int, invert bool) netip.Addr {
	var v [4]byte
	copy(v[:], b[off/8:off/8+4])
	if invert {
		for i := range v {
			v[i] ^= 0xff
		}
	}
	return netip.AddrFrom4(v)
}

// Carried is an IPv4 address an IPv6 address carries.
type Carried struct {
	Addr netip.Addr
	Via  string
}

// Embedded returns the IPv4 addresses a carries (none for an IPv4
// address or an IPv6 address of no such form). A Teredo address carries
// two: its server's and its client's.
func Embedded(a netip.Addr) []Carried {
	a = a.WithZone("")
	if !a.Is6() {
		return nil
	}
	var out []Carried
	b := a.As16()
	for _, c := range carriers {
		if !c.prefix.Contains(a) {
			continue
		}
		if c.via == ViaCompatible && (a == netip.IPv6Unspecified() || a == netip.IPv6Loopback()) {
			continue // :: and ::1 are themselves, not 0.0.0.0 and 0.0.0.1
		}
		out = append(out, Carried{Addr: ipv4At(b, c.off, c.invert), Via: c.via})
	}
	return out
}

// SpecialRange reports the special range a lies in, if any, and what it
// is. An IPv6 address that carries an IPv4 address (Embedded) is judged
// as that address: the range is then the IPv4 address's, and what says
// which form carried it.
func SpecialRange(a netip.Addr) (netip.Prefix, string, bool) {
	in, ok := classify(a)
	if !ok {
		return netip.Prefix{}, "", false
	}
	what := in.What
	if in.Via != "" {
		what = fmt.Sprintf("%s, carried as %s by %s", in.What, in.Via, a.WithZone(""))
	}
	return in.Range, what, true
}

// specialOf is the special range a itself lies in.
func specialOf(a netip.Addr) (special, bool) {
	for _, s := range specials {
		if s.prefix.Contains(a) {
			return s, true
		}
	}
	return special{}, false
}

// classify is the first reason a is internal by its ranges alone.
func classify(a netip.Addr) (Internal, bool) {
	all := classifyAll(a, nil)
	if len(all) == 0 {
		return Internal{}, false
	}
	return all[0], true
}

// classifyAll lists every reason a is internal by its ranges, appended
// to out.
func classifyAll(a netip.Addr, out []Internal) []Internal {
	a = a.Unmap().WithZone("")
	if s, ok := specialOf(a); ok {
		out = append(out, Internal{Addr: a, Range: s.prefix, What: s.what})
	}
	for _, c := range Embedded(a) {
		if s, ok := specialOf(c.Addr); ok {
			out = append(out, Internal{Addr: c.Addr, Via: c.Via, Range: s.prefix, What: s.what})
		}
	}
	return out
}

// Classify lists every reason a is internal: a special range it or an
// IPv4 address it carries lies in, and, when host is not nil, its being
// (or carrying) one of the host's own addresses. Empty means a is not
// internal. An error (the host's addresses could not be read) means the
// caller cannot tell, and should refuse the address.
func Classify(a netip.Addr, host HostAddrs) ([]Internal, error) {
	a = a.Unmap().WithZone("")
	out := classifyAll(a, nil)
	if host == nil {
		return out, nil
	}
	cands := []Carried{{Addr: a}}
	cands = append(cands, Embedded(a)...)
	for _, c := range cands {
		own, err := host.HostAddr(c.Addr)
		if err != nil {
			return out, fmt.Errorf("read the host's own addresses: %w", err)
		}
		if own {
			out = append(out, Internal{Addr: c.Addr, Via: c.Via, Range: netip.PrefixFrom(c.Addr, c.Addr.BitLen()), What: "one of this host's own addresses", Host: true})
		}
	}
	return out, nil
}

// ClassifyPrefix reports whether every address of p is internal by its
// ranges: p lies inside a special range, or inside a form that carries
// IPv4 addresses whose carried prefix lies inside one ([2002:7f00::/24]
// is 6to4 for 127.0.0.0/8). A prefix that only overlaps a special range
// (0.0.0.0/0) is not internal; its internal addresses are still refused
// one by one at dial time.
func ClassifyPrefix(p netip.Prefix) (Internal, bool) {
	in, _, ok := classifyPrefix(p)
	return in, ok
}

// classifyPrefix is ClassifyPrefix with the prefix it judged: p, or the
// IPv4 prefix p carries.
func classifyPrefix(p netip.Prefix) (Internal, netip.Prefix, bool) {
	p = p.Masked()
	if s, ok := specialAround(p); ok {
		return Internal{Addr: p.Addr(), Range: s.prefix, What: s.what}, p, true
	}
	a, bits := p.Addr(), p.Bits()
	if !a.Is6() {
		return Internal{}, netip.Prefix{}, false
	}
	b := a.As16()
	for _, c := range carriers {
		if bits < c.prefix.Bits() || !c.prefix.Contains(a) {
			continue
		}
		v, _ := ipv4At(b, c.off, c.invert).Prefix(min(max(bits-c.off, 0), 32))
		if s, ok := specialAround(v); ok {
			return Internal{Addr: v.Addr(), Via: c.via, Range: s.prefix, What: s.what}, v, true
		}
	}
	return Internal{}, netip.Prefix{}, false
}

// specialAround is the special range p lies inside, if any.
func specialAround(p netip.Prefix) (special, bool) {
	for _, s := range specials {
		if s.prefix.Addr().BitLen() == p.Addr().BitLen() && s.prefix.Bits() <= p.Bits() && s.prefix.Contains(p.Addr()) {
			return s, true
		}
	}
	return special{}, false
}

type special struct {
	prefix netip.Prefix
	what   string
}

// specials are the special ranges: internal to a host or a site, or
// never a destination on the internet.
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
		{"fec0::/10", "a site-local address (deprecated, private)"},
		{"ff00::/8", "a multicast address"},
	} {
		out = append(out, special{netip.MustParsePrefix(s.p), s.what})
	}
	return out
}()
