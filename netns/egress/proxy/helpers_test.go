package proxy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
)

// world is a fake internet: public addresses (as the proxy dials them)
// lead to in-process servers on 127.0.0.1, names resolve from a table,
// and where each client connection was going is known from a table.
type world struct {
	t     *testing.T
	mu    sync.Mutex
	hosts map[string][]netip.Addr   // name → addresses
	ups   map[netip.AddrPort]string // public address → 127.0.0.1:port
	dsts  map[int]netip.AddrPort    // client's local port → original destination
	dials []string                  // every address Dial was given
	logs  []egress.Conn
	logMu sync.Mutex
	// own are the addresses of the host the proxy dials from (HostAddr).
	own []netip.Addr
}

// HostAddr makes the world the proxy's egress.HostAddrs.
func (w *world) HostAddr(a netip.Addr) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, o := range w.own {
		if o == a {
			return true, nil
		}
	}
	return false, nil
}

func newWorld(t *testing.T) *world {
	return &world{t: t, hosts: map[string][]netip.Addr{}, ups: map[netip.AddrPort]string{}, dsts: map[int]netip.AddrPort{}}
}

func (w *world) resolve(_ context.Context, host string) ([]netip.Addr, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	as, ok := w.hosts[host]
	if !ok {
		return nil, fmt.Errorf("no such host %q", host)
	}
	return as, nil
}

func (w *world) dial(ctx context.Context, network, address string) (net.Conn, error) {
	w.mu.Lock()
	w.dials = append(w.dials, address)
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		w.mu.Unlock()
		w.t.Errorf("Dial was given %q, not an address:port literal", address)
		return nil, err
	}
	real, ok := w.ups[ap]
	w.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("connect %s: connection refused", address)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, real)
}

func (w *world) originalDst(c net.Conn) (netip.AddrPort, error) {
	port := c.RemoteAddr().(*net.TCPAddr).Port
	w.mu.Lock()
	defer w.mu.Unlock()
	ap, ok := w.dsts[port]
	if !ok {
		return netip.AddrPort{}, errors.New("no original destination")
	}
	return ap, nil
}

func (w *world) log(c egress.Conn) {
	w.logMu.Lock()
	defer w.logMu.Unlock()
	w.logs = append(w.logs, c)
}

func (w *world) logged() []egress.Conn {
	w.logMu.Lock()
	defer w.logMu.Unlock()
	return append([]egress.Conn(nil), w.logs...)
}

func (w *world) dialled() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.dials...)
}

// upstream serves handle on 127.0.0.1 and makes it reachable as pub.
func (w *world) upstream(pub string, handle func(net.Conn)) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		w.t.Fatal(err)
	}
	var wg sync.WaitGroup
	w.t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); handle(c) }()
		}
	}()
	w.mu.Lock()
	w.ups[netip.MustParseAddrPort(pub)] = l.Addr().String()
	w.mu.Unlock()
}

// httpUpstream answers every request with "hello <Host>" and closes.
func (w *world) httpUpstream(pub string) {
	w.upstream(pub, func(c net.Conn) {
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		body := "hello " + req.Host + " " + req.URL.Path
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	})
}

// tlsUpstream answers "tls hello <SNI>" after the handshake.
func (w *world) tlsUpstream(pub string, cert tls.Certificate) {
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	w.upstream(pub, func(c net.Conn) {
		tc := tls.Server(c, cfg)
		if err := tc.Handshake(); err != nil {
			return
		}
		fmt.Fprintf(tc, "tls hello %s\n", tc.ConnectionState().ServerName)
		io.Copy(io.Discard, tc) // until the client closes: no reset
		tc.Close()
	})
}

// start runs a proxy on 127.0.0.1 for c (world's hooks filled in).
func (w *world) start(c Config) (*Proxy, string) {
	c.Step = "build"
	if c.Resolve == nil {
		c.Resolve = w.resolve
	}
	c.Dial = w.dial
	if c.HostAddrs == nil {
		c.HostAddrs = w
	}
	c.OriginalDst = w.originalDst
	c.Log = w.log
	if c.PeekTimeout == 0 {
		c.PeekTimeout = 200 * time.Millisecond
	}
	p := New(c)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		w.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.ServeTransparent(l) }()
	w.t.Cleanup(func() {
		p.Close()
		if err := <-done; !errors.Is(err, ErrClosed) {
			w.t.Errorf("ServeTransparent returned %v, want ErrClosed", err)
		}
		checkNoGoroutines(w.t)
	})
	return p, l.Addr().String()
}

// connect opens a connection to the proxy as if the job had dialled dst.
func (w *world) connect(proxyAddr, dst string) net.Conn {
	w.mu.Lock()
	defer w.mu.Unlock() // held until the port is known: originalDst waits
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		w.t.Fatal(err)
	}
	w.dsts[c.LocalAddr().(*net.TCPAddr).Port] = netip.MustParseAddrPort(dst)
	w.t.Cleanup(func() { c.Close() })
	return c
}

// waitLogs waits until n lines are logged.
func (w *world) waitLogs(n int) []egress.Conn {
	w.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l := w.logged()
		if len(l) >= n {
			return l
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%d log lines after 5s, want %d: %+v", len(l), n, l)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func rules(t testing.TB, allow, deny []string) *egress.Rules {
	t.Helper()
	rs, err := egress.NewRules(allow, deny)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func mapper(t testing.TB, names ...string) *egress.Mapper {
	m := egress.NewMapper()
	for _, n := range names {
		if _, err := m.Map(n); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func mapped(t testing.TB, m *egress.Mapper, name string, port int) string {
	a, err := m.Map(name)
	if err != nil {
		t.Fatal(err)
	}
	return netip.AddrPortFrom(a, uint16(port)).String()
}

// selfSigned makes a certificate for names.
func selfSigned(t testing.TB, names ...string) (tls.Certificate, *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: names[0]},
		DNSNames:              names,
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// httpGet sends one request on c and returns the status line and body.
func httpGet(t testing.TB, c net.Conn, host, path string) (int, string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: test\r\n\r\n", path, host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	c.Close() // the job is done with it: the proxy's half-close ends
	return resp.StatusCode, string(b)
}

// expectClosed checks that the proxy closed c without sending anything.
func expectClosed(t testing.TB, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if len(b) > 0 {
		t.Errorf("read %q from a denied connection, want nothing", b)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("denied connection still open after 5s")
	}
}

// checkNoGoroutines fails when a goroutine of this package's proxy
// outlives it.
func checkNoGoroutines(t testing.TB) {
	t.Helper()
	var stacks string
	for i := 0; i < 200; i++ {
		buf := make([]byte, 1<<20)
		stacks = string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "proxy.(*Proxy)") && !strings.Contains(stacks, "proxy.(*session)") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("proxy goroutines left after Close:\n%s", stacks)
}

func lastLog(t testing.TB, w *world, n int) egress.Conn {
	t.Helper()
	l := w.waitLogs(n)
	return l[n-1]
}
