// Package hostaddr knows the host's own addresses: every address of every
// interface of the network namespace the process dials from, kept
// current. The egress proxy refuses them as upstream addresses
// (egress.Rules.CheckUpstream) unless the operator opens them, so that an
// allowed name whose DNS answer is the host's own address (or a listener
// the host binds there) does not lead a job to the host.
//
// A Set reads the addresses with net.InterfaceAddrs (one netlink dump,
// some 20µs) and keeps them for at most TTL; it reads them again at once
// when the kernel announces an address change (an RTM_NEWADDR or
// RTM_DELADDR message on a netlink subscription). A lookup is then a map
// read. Default is the process-wide Set the proxy uses.
package hostaddr

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
)

// TTL bounds how long a Set trusts what it read when no change was
// announced (the announcements can be lost when the kernel's socket
// buffer overflows).
const TTL = time.Second

// Set is the host's own addresses. It implements egress.HostAddrs and is
// safe for concurrent use.
type Set struct {
	// Read lists the addresses; nil: every interface's
	// (net.InterfaceAddrs).
	Read func() ([]netip.Addr, error)
	// Watch, when set, is started once, before the first read, and
	// calls changed whenever the addresses may have changed; nil: a
	// netlink subscription to address changes (WatchNetlink). It
	// returns an error when it cannot watch; the Set then relies on TTL.
	Watch func(changed func()) error
	// Now is the clock; nil: time.Now.
	Now func() time.Time

	watchOnce sync.Once
	gen       atomic.Uint64 // bumped by each announced change

	mu    sync.Mutex
	addrs map[netip.Addr]struct{}
	read  time.Time
	seen  uint64 // gen when addrs was read
	reads int    // how many times Read ran (for tests)
}

// Default is the host's: the network namespace this process started in.
var Default = &Set{}

// HostAddr reports whether a is one of the host's own addresses, reading
// them again when a change was announced or TTL has passed.
func (s *Set) HostAddr(a netip.Addr) (bool, error) {
	s.watchOnce.Do(s.startWatch)
	a = a.Unmap().WithZone("")
	now := s.now()
	gen := s.gen.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.addrs == nil || gen != s.seen || now.Sub(s.read) >= TTL || now.Before(s.read) {
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
		s.addrs, s.read, s.seen = m, now, gen
	}
	_, ok := s.addrs[a]
	return ok, nil
}

// Addrs are the addresses the Set holds now (reading them if need be),
// in no order.
func (s *Set) Addrs() ([]netip.Addr, error) {
	if _, err := s.HostAddr(netip.IPv4Unspecified()); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]netip.Addr, 0, len(s.addrs))
	for a := range s.addrs {
		out = append(out, a)
	}
	return out, nil
}

func (s *Set) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Set) startWatch() {
	watch := s.Watch
	if watch == nil {
		watch = WatchNetlink
	}
	// Without a watch the TTL alone keeps the Set current.
	_ = watch(func() { s.gen.Add(1) })
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

// WatchNetlink calls changed on every address change the kernel
// announces in the calling thread's network namespace (and on every
// message it could not read), from a goroutine that lives as long as the
// process; once more, then no more, if the subscription ends (the
// kernel's buffer overflowed), after which only TTL keeps a Set current.
func WatchNetlink(changed func()) error {
	ch := make(chan netlink.AddrUpdate, 64)
	err := netlink.AddrSubscribeWithOptions(ch, nil, netlink.AddrSubscribeOptions{
		// A message that could not be read may have been a change.
		ErrorCallback: func(error) { changed() },
	})
	if err != nil {
		return fmt.Errorf("watch the host's addresses: %w", err)
	}
	go func() {
		for range ch {
			changed()
		}
		changed() // the subscription ended: read again, then rely on TTL
	}()
	return nil
}
