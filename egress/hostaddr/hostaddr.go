// Package hostaddr knows the host's own addresses: every address of every
// interface of the network namespace the process dials from, kept
// current. The egress proxy refuses them as upstream addresses
// (egress.Rules.CheckUpstream) unless the operator opens them, so that an
// allowed name whose DNS answer is the host's own address does not lead a
// job to a listener the host binds there; other fetches on a workflow's
// behalf use the same Set against server-side request forgery
// (egress.Classify).
//
// A Set reads the addresses with net.InterfaceAddrs (one netlink dump:
// about 20µs on an idle machine with a few interfaces, 0.3ms on a loaded
// one) at most once per TTL, and only when asked: a lookup is otherwise a
// map read under a mutex (about 0.1µs). An address the host gains is thus
// refused at the latest TTL after it appears. Default is the process-wide
// Set the proxy uses.
package hostaddr

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// TTL is how long a Set trusts what it read.
const TTL = 100 * time.Millisecond

// Set is the host's own addresses. It implements egress.HostAddrs and is
// safe for concurrent use.
type Set struct {
	// Read lists the addresses; nil: every interface's
	// (InterfaceAddrs, in the calling thread's network namespace).
	Read func() ([]netip.Addr, error)
	// Now is the clock; nil: time.Now.
	Now func() time.Time

	mu    sync.Mutex
	addrs map[netip.Addr]struct{}
	read  time.Time
	reads int // how many times Read ran (for tests)
}

// Default is the host's: the network namespace this process runs in.
var Default = &Set{}

// HostAddr reports whether a is one of the host's own addresses, reading
// them again when what was read is TTL old. A failed read is an error
// (and is tried again at the next call): the caller refuses the address.
func (s *Set) HostAddr(a netip.Addr) (bool, error) {
	a = a.Unmap().WithZone("")
	now := time.Now()
	if s.Now != nil {
		now = s.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.addrs == nil || now.Sub(s.read) >= TTL || now.Before(s.read) {
		read := s.Read
		if read == nil {
			read = InterfaceAddrs
		}
		as, err := read()
		s.reads++
		if err != nil {
			s.addrs = nil
			return false, err
		}
		m := make(map[netip.Addr]struct{}, len(as))
		for _, x := range as {
			m[x.Unmap().WithZone("")] = struct{}{}
		}
		s.addrs, s.read = m, now
	}
	_, ok := s.addrs[a]
	return ok, nil
}

// InterfaceAddrs lists the address of every interface, IPv4 and IPv6,
// link-local ones included.
func InterfaceAddrs() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list the host's interface addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		var ip net.IP
		switch v := a.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		}
		if x, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, x.Unmap())
		}
	}
	return out, nil
}
