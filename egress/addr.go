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
