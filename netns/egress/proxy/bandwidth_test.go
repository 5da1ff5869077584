package proxy

import (
	"context"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// The limit is the step's, not each connection's: two connections
// downloading 100 KB each at 100 KB/s take about (200 - burst) KB / 100
// KB/s = 1.875s together. The bound is generous for loaded machines.
func TestBandwidthSharedByConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("takes two seconds")
	}
	w := newWorld(t)
	w.upstream("203.0.113.70:80", func(c net.Conn) {
		c.Write(make([]byte, 100_000))
		c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, c)
	})
	p, addr := w.start(Config{Rules: rules(t, []string{"203.0.113.70"}, nil), Bandwidth: 100_000, PeekTimeout: 10 * time.Millisecond})
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		c := w.connect(addr, "203.0.113.70:80")
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			if n, err := io.Copy(io.Discard, c); n != 100_000 || err != nil {
				t.Errorf("read %d, %v", n, err)
			}
			c.Close()
		}()
	}
	wg.Wait()
	if d := time.Since(start); d < 1500*time.Millisecond || d > 15*time.Second {
		t.Errorf("200 KB at 100 KB/s took %s, want about 1.9s", d)
	}
	w.waitLogs(2)
	if st := p.Stats(); st.BytesIn != 200_000 {
		t.Errorf("stats %+v", st)
	}
}

// Close does not wait for the bucket: a connection held back by the
// limit ends at once.
func TestCloseDuringBandwidthWait(t *testing.T) {
	w := newWorld(t)
	w.upstream("203.0.113.71:80", func(c net.Conn) { c.Write(make([]byte, 1<<20)) })
	p, addr := w.start(Config{Rules: rules(t, []string{"203.0.113.71"}, nil), Bandwidth: 1000, PeekTimeout: 10 * time.Millisecond})
	c := w.connect(addr, "203.0.113.71:80")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %s", d)
	}
	if got := lastLog(t, w, 1); got.BytesIn < 4096 || got.BytesIn > 16384 {
		t.Errorf("log %+v", got)
	}
}

// BenchmarkProxyThroughput copies through the proxy; BenchmarkDirectCopy
// is the same transfer over a plain loopback connection, the baseline.
func BenchmarkProxyThroughput(b *testing.B) {
	b.Run("proxy", func(b *testing.B) { benchTransfer(b, true) })
	b.Run("direct", func(b *testing.B) { benchTransfer(b, false) })
}

const benchSize = 1 << 20

func benchTransfer(b *testing.B, viaProxy bool) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		buf := make([]byte, benchSize)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				c.Write(buf)
				c.(*net.TCPConn).CloseWrite()
				io.Copy(io.Discard, c)
				c.Close()
			}()
		}
	}()
	target := l.Addr().String()
	if viaProxy {
		upstream := target
		pub := netip.MustParseAddrPort("203.0.113.80:80")
		p := New(Config{
			Step:  "bench",
			Rules: rules(b, []string{"203.0.113.80"}, nil),
			Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, upstream)
			},
			OriginalDst: func(net.Conn) (netip.AddrPort, error) { return pub, nil },
			PeekTimeout: time.Millisecond,
		})
		pl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go p.ServeTransparent(pl)
		defer p.Close()
		target = pl.Addr().String()
	}
	b.SetBytes(benchSize)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := net.Dial("tcp", target)
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, c); n != benchSize || err != nil {
			b.Fatalf("read %d, %v", n, err)
		}
		c.Close()
	}
}
