package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"testing"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/internal/testnet"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/netns"
)

// room is a step's namespace with a started gateway allowing
// 203.0.113.0/24:80, whose upstream is testnet's internet.
type room struct {
	ns *netns.NS
	gw *Gateway
	in *testnet.Internet
}

func newRoom(tb testing.TB, bandwidth int64) *room {
	tb.Helper()
	testtier.Root(tb)
	in := testnet.New(tb)
	b := make([]byte, 4)
	rand.Read(b)
	ns, err := netns.Create(netns.Prefix + "gwb-" + hex.EncodeToString(b))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := ns.Delete(); err != nil {
			tb.Error(err)
		}
	})
	rules, err := egress.NewRules([]string{"203.0.113.0/24:80"}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	gw, err := New(Config{Step: "bench", Rules: rules, Bandwidth: bandwidth, Resolve: in.Resolve, Dial: in.Dial})
	if err != nil {
		tb.Fatal(err)
	}
	if err := gw.Start(ns, ""); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := gw.Stop(); err != nil {
			tb.Error(err)
		}
	})
	return &room{ns: ns, gw: gw, in: in}
}

// dialInside opens a TCP connection from inside the step's namespace, as
// the job would.
func (r *room) dialInside(addr string) (net.Conn, error) {
	var c net.Conn
	err := r.ns.Do(func() error {
		var err error
		c, err = net.Dial("tcp", addr)
		return err
	})
	return c, err
}

// get sends one HTTP/1.0 request on c and reads the whole answer.
func get(c net.Conn, path string) (int64, error) {
	defer c.Close()
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: 203.0.113.10\r\n\r\n", path); err != nil {
		return 0, err
	}
	n, err := io.Copy(io.Discard, c)
	if err == nil && n == 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// BenchmarkConnect: one short HTTP exchange per iteration, through the
// step's proxy (from inside its namespace, redirected by its firewall,
// decided, dialled upstream) and, as the baseline, straight to the same
// server. The difference is what egress adds to a connection's setup.
func BenchmarkConnect(b *testing.B) {
	r := newRoom(b, 0)
	for _, c := range []struct {
		name string
		dial func() (net.Conn, error)
	}{
		{"proxied", func() (net.Conn, error) { return r.dialInside("203.0.113.10:80") }},
		{"direct", func() (net.Conn, error) { return r.in.Dial(b.Context(), "tcp", "203.0.113.10:80") }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				conn, err := c.dial()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := get(conn, "/"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkThroughput: 32 MiB per iteration through the proxy and
// straight, GOMAXPROCS as the run sets it (-cpu 1 for one core).
func BenchmarkThroughput(b *testing.B) {
	const size = 32 << 20
	r := newRoom(b, 0)
	for _, c := range []struct {
		name string
		dial func() (net.Conn, error)
	}{
		{"proxied", func() (net.Conn, error) { return r.dialInside("203.0.113.10:80") }},
		{"direct", func() (net.Conn, error) { return r.in.Dial(b.Context(), "tcp", "203.0.113.10:80") }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				conn, err := c.dial()
				if err != nil {
					b.Fatal(err)
				}
				if n, err := get(conn, fmt.Sprintf("/bytes/%d", size)); err != nil || n < size {
					b.Fatalf("got %d bytes: %v", n, err)
				}
			}
		})
	}
}

// BenchmarkRoomMemory reports the Go heap and stacks one step's started
// gateway holds (firewall, resolver, proxy listeners; no connection), and
// what one open connection through the proxy adds beyond the same
// connection made directly (which pays testnet's server side too, in this
// process).
func BenchmarkRoomMemory(b *testing.B) {
	testtier.Root(b)
	in := testnet.New(b)
	mem := func() float64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return float64(m.HeapInuse + m.StackInuse)
	}
	const n = 16
	open := func(dial func() (net.Conn, error)) []net.Conn {
		var conns []net.Conn
		for range n {
			c, err := dial()
			if err != nil {
				b.Fatal(err)
			}
			// A request and the first byte of its answer: the proxy has
			// peeked, decided and dialled upstream by then.
			fmt.Fprintf(c, "GET /bytes/1 HTTP/1.1\r\nHost: 203.0.113.10\r\n\r\n")
			if _, err := c.Read(make([]byte, 1)); err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
		}
		return conns
	}
	closeAll := func(cs []net.Conn) {
		for _, c := range cs {
			c.Close()
		}
	}
	var perRoom, perConn float64
	i := 0
	const rooms = 4
	for b.Loop() {
		i++
		before := mem()
		var rs []*room
		for k := range rooms {
			ns, err := netns.Create(fmt.Sprintf("%sgwm-%d-%d-%d", netns.Prefix, os.Getpid(), i, k))
			if err != nil {
				b.Fatal(err)
			}
			rules, _ := egress.NewRules([]string{"203.0.113.0/24:80"}, nil)
			gw, _ := New(Config{Step: "bench", Rules: rules, Resolve: in.Resolve, Dial: in.Dial})
			if err := gw.Start(ns, ""); err != nil {
				b.Fatal(err)
			}
			rs = append(rs, &room{ns: ns, gw: gw, in: in})
		}
		started := mem()
		r := rs[0]
		direct := open(func() (net.Conn, error) { return in.Dial(b.Context(), "tcp", "203.0.113.10:80") })
		withDirect := mem()
		closeAll(direct)
		base := mem()
		proxied := open(func() (net.Conn, error) { return r.dialInside("203.0.113.10:80") })
		withProxied := mem()
		closeAll(proxied)
		perRoom += (started - before) / rooms
		perConn += ((withProxied - base) - (withDirect - started)) / n
		for _, r := range rs {
			if err := r.gw.Stop(); err != nil {
				b.Error(err)
			}
			if err := r.ns.Delete(); err != nil {
				b.Error(err)
			}
		}
	}
	b.ReportMetric(perRoom/float64(i), "B/room")
	b.ReportMetric(perConn/float64(i), "B/conn-over-direct")
}
