package proxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
)

// startEndpoint runs the proxy's HTTP proxy endpoint for c.
func (w *world) startEndpoint(c Config) (*Proxy, string) {
	c.Step = "build"
	c.Resolve = w.resolve
	c.Dial = w.dial
	if c.HostAddrs == nil {
		c.HostAddrs = w
	}
	c.Log = w.log
	p := New(c)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		w.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.ServeEndpoint(l) }()
	w.t.Cleanup(func() {
		p.Close()
		if err := <-done; !errors.Is(err, ErrClosed) {
			w.t.Errorf("ServeEndpoint returned %v, want ErrClosed", err)
		}
		checkNoGoroutines(w.t)
	})
	return p, l.Addr().String()
}

// request sends raw to the endpoint and returns the response and the
// connection (positioned after the response head).
func request(t *testing.T, addr, raw string) (*http.Response, *bufio.Reader, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, raw)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("read response to %q: %v", raw, err)
	}
	return resp, br, c
}

func body(resp *http.Response) string {
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestConnectAllowed(t *testing.T) {
	w := newWorld(t)
	cert, pool := selfSigned(t, "api.example.com")
	w.tlsUpstream("203.0.113.10:443", cert)
	w.hosts["api.example.com"] = []netip.Addr{netip.MustParseAddr("203.0.113.10")}
	_, addr := w.startEndpoint(Config{Rules: rules(t, []string{"api.example.com:443"}, nil)})

	resp, br, c := request(t, addr, "CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body(resp))
	}
	tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: "api.example.com", RootCAs: pool})
	line, err := bufio.NewReader(tc).ReadString('\n')
	if err != nil || line != "tls hello api.example.com\n" {
		t.Fatalf("%q %v", line, err)
	}
	c.Close()
	got := lastLog(t, w, 1)
	if !got.Allow || got.Name != "api.example.com" || got.NameSource != egress.FromConnect || got.Dst != "" || got.Upstream != "203.0.113.10:443" || got.BytesIn == 0 {
		t.Errorf("log %+v", got)
	}
}

// What goes through a CONNECT tunnel first is judged: a ClientHello
// inside it naming another host than the tunnel's is denied, though the
// server at the tunnel's address would serve that host too.
func TestConnectTunnelNameJudged(t *testing.T) {
	w := newWorld(t)
	cert, _ := selfSigned(t, "api.example.com", "denied.example")
	w.tlsUpstream("203.0.113.10:443", cert)
	w.hosts["api.example.com"] = []netip.Addr{netip.MustParseAddr("203.0.113.10")}
	_, addr := w.startEndpoint(Config{Rules: rules(t, []string{"api.example.com:443"}, nil)})

	resp, br, c := request(t, addr, "CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body(resp))
	}
	tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: "denied.example", InsecureSkipVerify: true})
	if err := tc.Handshake(); err == nil {
		line, _ := bufio.NewReader(tc).ReadString('\n')
		t.Fatalf("a ClientHello for another host went through the tunnel: %q", line)
	}
	c.Close()
	got := lastLog(t, w, 1)
	if got.Allow || got.SNI != "denied.example" || !strings.Contains(got.Reason, `opened a tunnel to "api.example.com" (CONNECT) and then asked for "denied.example"`) {
		t.Errorf("log %+v", got)
	}
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

func TestConnectDenied(t *testing.T) {
	w := newWorld(t)
	_, addr := w.startEndpoint(Config{Rules: rules(t, []string{"api.example.com:443"}, []string{"10.0.0.0/8"})})
	for _, tc := range []struct{ target, status, text string }{
		{"other.org:443", "403", `add "other.org:443"`},
		{"api.example.com:22", "403", `"api.example.com:22"`},
		{"10.1.1.1:443", "403", "forbidden by the policy"},
		{"198.19.5.5:443", "403", "never gave it out"},
		{"api.example.com", "400", "want CONNECT host:port"},
		{"[2001:db8::1]:443", "403", `add "[2001:db8::1]:443"`},
		{"2001:db8::1:443", "400", "send CONNECT host:port"},
		{"bad_host!:443", "400", "not a host name"},
	} {
		resp, _, _ := request(t, addr, "CONNECT "+tc.target+" HTTP/1.1\r\n\r\n")
		b := body(resp)
		if fmt.Sprint(resp.StatusCode) != tc.status || !strings.Contains(b, tc.text) {
			t.Errorf("CONNECT %s: %d %q, want %s and %q", tc.target, resp.StatusCode, b, tc.status, tc.text)
		}
	}
	if len(w.dialled()) != 0 {
		t.Errorf("dialled %q", w.dialled())
	}
	if n := len(w.waitLogs(8)); n != 8 {
		t.Errorf("%d log lines", n)
	}
}

func TestConnectLiteralByCIDRAndBadGateway(t *testing.T) {
	w := newWorld(t)
	w.upstream("203.0.113.50:22", func(c net.Conn) { io.WriteString(c, "SSH-2.0-test\r\n") })
	_, addr := w.startEndpoint(Config{Rules: rules(t, []string{"203.0.113.0/24"}, nil)})
	resp, br, c := request(t, addr, "CONNECT 203.0.113.50:22 HTTP/1.1\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if l, err := br.ReadString('\n'); err != nil || l != "SSH-2.0-test\r\n" {
		t.Fatalf("%q %v", l, err)
	}
	c.Close()
	got := lastLog(t, w, 1)
	if !got.Allow || got.Dst != "203.0.113.50:22" || got.Name != "" {
		t.Errorf("log %+v", got)
	}
	resp, _, _ = request(t, addr, "CONNECT 203.0.113.51:22 HTTP/1.1\r\n\r\n") // nothing there
	if b := body(resp); resp.StatusCode != 502 || !strings.Contains(b, "connection refused") {
		t.Errorf("%d %q", resp.StatusCode, b)
	}
}

func TestAbsoluteFormForwarded(t *testing.T) {
	w := newWorld(t)
	seen := make(chan http.Header, 1)
	w.upstream("203.0.113.60:80", func(c net.Conn) {
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		seen <- req.Header
		b, _ := io.ReadAll(req.Body)
		body := fmt.Sprintf("%s %s %s %s", req.Method, req.Host, req.RequestURI, b)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	})
	w.hosts["www.example.com"] = []netip.Addr{netip.MustParseAddr("203.0.113.60")}
	_, addr := w.startEndpoint(Config{Rules: rules(t, []string{"*.example.com"}, nil)})
	resp, _, _ := request(t, addr, "POST http://www.example.com/up?x=1 HTTP/1.1\r\nHost: www.example.com\r\nProxy-Authorization: secret\r\nContent-Length: 4\r\n\r\ndata")
	if b := body(resp); resp.StatusCode != 200 || b != "POST www.example.com /up?x=1 data" {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
	if h := <-seen; h.Get("Proxy-Authorization") != "" || h.Get("Connection") != "close" {
		t.Errorf("upstream saw headers %v", h)
	}
	got := lastLog(t, w, 1)
	if !got.Allow || got.Host != "www.example.com" || got.NameSource != egress.FromConnect || got.BytesOut == 0 || got.BytesIn == 0 {
		t.Errorf("log %+v", got)
	}

	// The URL's host, which was decided, is the Host upstream sees.
	resp, _, _ = request(t, addr, "GET http://www.example.com/h HTTP/1.1\r\nHost: evil.com\r\n\r\n")
	if b := body(resp); resp.StatusCode != 200 || b != "GET www.example.com /h " {
		t.Errorf("%d %q", resp.StatusCode, b)
	}
	<-seen

	resp, _, _ = request(t, addr, "GET http://example.org/ HTTP/1.1\r\nHost: example.org\r\n\r\n")
	if b := body(resp); resp.StatusCode != 403 || !strings.Contains(b, `"example.org:80"`) {
		t.Errorf("%d %q", resp.StatusCode, b)
	}
	resp, _, _ = request(t, addr, "GET / HTTP/1.1\r\nHost: www.example.com\r\n\r\n")
	if b := body(resp); resp.StatusCode != 400 || !strings.Contains(b, "CONNECT host:port") {
		t.Errorf("%d %q", resp.StatusCode, b)
	}
}

func TestEndpointBoundsHead(t *testing.T) {
	w := newWorld(t)
	_, addr := w.startEndpoint(Config{Rules: rules(t, []string{"api.example.com"}, nil)})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	go func() {
		io.WriteString(c, "GET http://api.example.com/ HTTP/1.1\r\n")
		for i := 0; i < 1000; i++ {
			if _, err := fmt.Fprintf(c, "X-Pad-%d: %s\r\n", i, strings.Repeat("a", 100)); err != nil {
				return
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b := body(resp); resp.StatusCode != 400 || !strings.Contains(b, "KiB") {
		t.Errorf("%d %q", resp.StatusCode, b)
	}
}
