package hostaddr

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
)

var _ egress.HostAddrs = (*Set)(nil)

// The Set reads again once TTL has passed, and not before; a failed
// read is an error, and read again at the next lookup.
func TestSetCache(t *testing.T) {
	now := time.Unix(1000, 0)
	addrs := []netip.Addr{netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("fe80::1")}
	var fail error
	s := &Set{
		Read: func() ([]netip.Addr, error) { return addrs, fail },
		Now:  func() time.Time { return now },
	}
	check := func(a string, want bool, reads int) {
		t.Helper()
		got, err := s.HostAddr(netip.MustParseAddr(a))
		if err != nil || got != want || s.reads != reads {
			t.Errorf("HostAddr(%s) = %v, %v after %d reads; want %v after %d", a, got, err, s.reads, want, reads)
		}
	}
	check("192.0.2.2", true, 1)
	check("::ffff:192.0.2.2", true, 1)
	check("fe80::1%eth0", true, 1)
	check("192.0.2.3", false, 1)

	addrs = append(addrs, netip.MustParseAddr("192.0.2.3"))
	now = now.Add(TTL - time.Millisecond)
	check("192.0.2.3", false, 1) // TTL not passed
	now = now.Add(time.Millisecond)
	check("192.0.2.3", true, 2)
	check("192.0.2.3", true, 2)

	addrs = addrs[:1]
	now = now.Add(-time.Second) // the clock went back
	check("192.0.2.3", false, 3)

	fail = errors.New("netlink: no buffer space")
	now = now.Add(TTL)
	if _, err := s.HostAddr(netip.MustParseAddr("192.0.2.2")); err == nil {
		t.Error("a failed read is no error")
	}
	fail = nil
	check("192.0.2.2", true, 5) // read again after a failure
}

// The real Set lists this namespace's addresses, loopback among them.
func TestInterfaceAddrs(t *testing.T) {
	as, err := InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != len(ifs) {
		t.Errorf("%d addresses, the interfaces have %d", len(as), len(ifs))
	}
	s := &Set{}
	for _, a := range as {
		if ok, err := s.HostAddr(a); !ok || err != nil {
			t.Errorf("HostAddr(%s) = %v, %v", a, ok, err)
		}
	}
	if ok, _ := s.HostAddr(netip.MustParseAddr("127.0.0.1")); !ok {
		t.Error("127.0.0.1 is not a host address")
	}
}

func TestSetConcurrent(t *testing.T) {
	s := &Set{}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				if _, err := s.HostAddr(netip.MustParseAddr("127.0.0.1")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkHostAddr is the lookup on the dial path: a map read while
// nothing changed.
func BenchmarkHostAddr(b *testing.B) {
	s := &Set{}
	a := netip.MustParseAddr("203.0.113.10")
	for i := 0; i < b.N; i++ {
		if _, err := s.HostAddr(a); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(s.reads), "reads")
}

// BenchmarkInterfaceAddrs is one read of the addresses (at most once per
// TTL, when asked).
func BenchmarkInterfaceAddrs(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if _, err := InterfaceAddrs(); err != nil {
			b.Fatal(err)
		}
	}
}
