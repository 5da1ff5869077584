package proxy

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/egress/hostaddr"
	"github.com/agentsandbox/agentsandbox/internal/testnet"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/netns"
)

// TestTransparentInNetns is the proxy with the real original destination
// (SO_ORIGINAL_DST / IP6T_SO_ORIGINAL_DST): a step namespace of its own
// with the step's firewall redirecting to the proxy's listener, and
// upstream in testnet's made-up internet. Nothing touches the host's
// network or firewall.
func TestTransparentInNetns(t *testing.T) {
	testtier.Root(t)
	in := testnet.New(t)
	b := make([]byte, 4)
	rand.Read(b)
	ns, err := netns.Create(netns.Prefix + "ptest-" + hex.EncodeToString(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.Delete(); err != nil {
			t.Error(err)
		}
	})
	l, err := ns.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.SetupEgress(netns.Egress{ProxyPort: uint16(l.Addr().(*net.TCPAddr).Port)}); err != nil {
		t.Fatal(err)
	}
	m := egress.NewMapper()
	var mu sync.Mutex
	var logs []egress.Conn
	p := New(Config{
		Step:        "netns",
		Rules:       rules(t, []string{"api.example.test", "2001:db8::/32"}, nil),
		Mapper:      m,
		Resolve:     in.Resolve,
		Dial:        in.Dial,
		PeekTimeout: 200 * time.Millisecond,
		Log:         func(c egress.Conn) { mu.Lock(); logs = append(logs, c); mu.Unlock() },
	})
	done := make(chan error, 1)
	go func() { done <- p.ServeTransparent(l) }()

	dial := func(dst string) net.Conn {
		t.Helper()
		var c net.Conn
		if err := ns.Do(func() error {
			var err error
			c, err = net.DialTimeout("tcp", dst, 5*time.Second)
			return err
		}); err != nil {
			t.Fatalf("dial %s inside the step: %v", dst, err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c
	}

	// A name the step's resolver gave, over IPv4.
	c := dial(mapped(t, m, "api.example.test", testnet.HTTPPort))
	fmt.Fprintf(c, "GET /x HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if want := "testnet GET api.example.test /x 203.0.113.10:80\n"; string(body) != want {
		t.Errorf("got %q, want %q", body, want)
	}
	c.Close()

	// An IPv6 address by CIDR, TLS end to end.
	raw := dial("[2001:db8::10]:443")
	tc := tls.Client(raw, &tls.Config{ServerName: "api.example.test", RootCAs: in.RootCAs})
	fmt.Fprintf(tc, "GET /tls HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	if !strings.HasPrefix(string(body), "testnet GET api.example.test /tls [2001:db8::10]:443") {
		t.Errorf("got %q", body)
	}
	tc.Close()

	// An address no rule allows: a 403 naming it.
	c = dial("198.51.100.7:80")
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: evil.example.test\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || !strings.Contains(string(body), `"198.51.100.7:80"`) {
		t.Errorf("%d %q", resp.StatusCode, body)
	}
	c.Close()

	p.Close()
	if err := <-done; err != ErrClosed {
		t.Errorf("ServeTransparent: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logs) != 3 {
		t.Fatalf("%d log lines: %+v", len(logs), logs)
	}
	want := []struct{ dst, upstream string }{
		{"198.19.0.1:80", "203.0.113.10:80"},
		{"[2001:db8::10]:443", "[2001:db8::10]:443"},
		{"198.51.100.7:80", ""},
	}
	byDst := map[string]egress.Conn{}
	for _, l := range logs { // in the order the connections ended
		byDst[l.Dst] = l
	}
	for _, w := range want {
		if l, ok := byDst[w.dst]; !ok || l.Upstream != w.upstream {
			t.Errorf("log of %s: %+v, want upstream %q", w.dst, l, w.upstream)
		}
	}
}

// TestHostAddressInNetns: the namespace the proxy dials from plays the
// host, with testnet's servers listening on its own addresses. An allowed
// name whose upstream DNS answer is one of them, directly or carried in
// an IPv6 form, is refused; the listener there never sees a request.
func TestHostAddressInNetns(t *testing.T) {
	testtier.Root(t)
	in := testnet.New(t)
	own := &hostaddr.Set{
		Read: func() ([]netip.Addr, error) {
			var as []netip.Addr
			err := in.NS.Do(func() error {
				var err error
				as, err = hostaddr.InterfaceAddrs()
				return err
			})
			return as, err
		},
	}
	b := make([]byte, 4)
	rand.Read(b)
	ns, err := netns.Create(netns.Prefix + "ptest-" + hex.EncodeToString(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.Delete(); err != nil {
			t.Error(err)
		}
	})
	l, err := ns.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.SetupEgress(netns.Egress{ProxyPort: uint16(l.Addr().(*net.TCPAddr).Port)}); err != nil {
		t.Fatal(err)
	}
	answers := map[string]netip.Addr{
		"api.example.test":    testnet.API, // the host's own address
		"mapped.example.test": netip.MustParseAddr("::ffff:203.0.113.10"),
		"6to4.example.test":   netip.MustParseAddr("2002:cb00:710a::1"), // 6to4 for 203.0.113.10
		"nat64.example.test":  netip.MustParseAddr("64:ff9b::cb00:710a"),
	}
	m := egress.NewMapper()
	var mu sync.Mutex
	var logs []egress.Conn
	var allow []string
	for n := range answers {
		allow = append(allow, n+":80")
	}
	p := New(Config{
		Step:  "netns",
		Rules: rules(t, allow, nil), Mapper: m,
		Resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return []netip.Addr{answers[host]}, nil
		},
		Dial:        in.Dial,
		HostAddrs:   own,
		PeekTimeout: 200 * time.Millisecond,
		Log:         func(c egress.Conn) { mu.Lock(); logs = append(logs, c); mu.Unlock() },
	})
	done := make(chan error, 1)
	go func() { done <- p.ServeTransparent(l) }()
	for name := range answers {
		var c net.Conn
		if err := ns.Do(func() error {
			var err error
			c, err = net.DialTimeout("tcp", mapped(t, m, name, testnet.HTTPPort), 5*time.Second)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", name)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 502 || !strings.Contains(string(body), "one of this host's own addresses") {
			t.Errorf("%s: %d %q", name, resp.StatusCode, body)
		}
		c.Close()
	}
	p.Close()
	<-done
	if r := in.Requests(); len(r) != 0 {
		t.Errorf("the host's listener was reached: %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, l := range logs {
		if l.Upstream != "" || !strings.Contains(l.Error, "egress_internal") {
			t.Errorf("log %+v", l)
		}
	}
}

// TestLateNameInNetns: the job looks up an allowed name and then names
// another host of the same server late: a Host line after a pause past
// PeekTimeout, a ClientHello whose first byte comes alone, a ClientHello
// of 17 KiB over two records. Each is judged when it is complete, and
// denied; testnet's server never answers for the other host.
func TestLateNameInNetns(t *testing.T) {
	testtier.Root(t)
	in := testnet.New(t)
	b := make([]byte, 4)
	rand.Read(b)
	ns, err := netns.Create(netns.Prefix + "ptest-" + hex.EncodeToString(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.Delete(); err != nil {
			t.Error(err)
		}
	})
	l, err := ns.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.SetupEgress(netns.Egress{ProxyPort: uint16(l.Addr().(*net.TCPAddr).Port)}); err != nil {
		t.Fatal(err)
	}
	m := egress.NewMapper()
	p := New(Config{
		Step:  "netns",
		Rules: rules(t, []string{"api.example.test:80", "api.example.test:443"}, nil), Mapper: m,
		Resolve: in.Resolve, Dial: in.Dial,
		PeekTimeout: 200 * time.Millisecond,
	})
	done := make(chan error, 1)
	go func() { done <- p.ServeTransparent(l) }()
	defer func() { p.Close(); <-done }()
	dial := func(port int) net.Conn {
		t.Helper()
		var c net.Conn
		if err := ns.Do(func() error {
			var err error
			c, err = net.DialTimeout("tcp", mapped(t, m, "api.example.test", port), 5*time.Second)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c
	}

	c := dial(testnet.HTTPPort)
	io.WriteString(c, "GET / HTTP/1.1\r\n")
	time.Sleep(time.Second)
	io.WriteString(c, "Host: evil.example.test\r\nConnection: close\r\n\r\n")
	got, _ := io.ReadAll(c)
	c.Close()
	if !strings.Contains(string(got), "403 Forbidden") || strings.Contains(string(got), "testnet GET") {
		t.Errorf("a slow Host naming another host: %q", got)
	}

	cfg := func(name string, protos []string) *tls.Config {
		return &tls.Config{ServerName: name, RootCAs: in.RootCAs, NextProtos: protos}
	}
	shake := func(c net.Conn, cfg *tls.Config) error {
		tc := tls.Client(c, cfg)
		defer tc.Close()
		return tc.Handshake()
	}
	if err := shake(&slowConn{Conn: dial(testnet.TLSPort), pause: time.Second}, cfg("evil.example.test", nil)); err == nil {
		t.Error("a ClientHello for another host after a pause went through")
	}
	if err := shake(dial(testnet.TLSPort), cfg("evil.example.test", bigProtos(70))); err == nil {
		t.Error("a 17 KiB ClientHello for another host went through")
	}
	// The big one for the name looked up goes through.
	tc := tls.Client(dial(testnet.TLSPort), cfg("api.example.test", bigProtos(70)))
	fmt.Fprintf(tc, "GET /big HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatalf("a 17 KiB ClientHello for the name looked up: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	tc.Close()
	if !strings.HasPrefix(string(body), "testnet GET api.example.test /big") {
		t.Errorf("got %q", body)
	}
	for _, r := range in.Requests() {
		if r.Host == "evil.example.test" || r.ServerName == "evil.example.test" {
			t.Errorf("testnet answered for the other host: %+v", r)
		}
	}
}
