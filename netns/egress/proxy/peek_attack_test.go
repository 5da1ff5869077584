package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
)

// vhostUpstream is a real net/http server at pub that answers every
// request "vhost <Host>": one address serving many names, as a CDN or a
// shared host does. Which name a request reaches is the server's reading
// of it, not the proxy's.
func (w *world) vhostUpstream(pub string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		w.t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(rw, "vhost %s", r.Host)
	}), ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(l)
	w.t.Cleanup(func() { srv.Close() })
	w.mu.Lock()
	w.ups[netip.MustParseAddrPort(pub)] = l.Addr().String()
	w.mu.Unlock()
}

// vhostWorld is a proxy for a step allowed api.example.com:80, which
// resolves to a vhost server that also serves denied.example.
func vhostWorld(t *testing.T, c Config) (*world, string, string) {
	w := newWorld(t)
	w.vhostUpstream("203.0.113.10:80")
	w.hosts["api.example.com"] = []netip.Addr{netip.MustParseAddr("203.0.113.10")}
	m := egress.NewMapper()
	dst := mapped(t, m, "api.example.com", 80)
	c.Rules, c.Mapper = rules(t, []string{"api.example.com:80"}, nil), m
	_, addr := w.start(c)
	return w, addr, dst
}

// answer reads what the proxy or upstream sent back until the end, and
// closes c (so that the session ends and is logged).
func answer(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, _ := io.ReadAll(c)
	c.Close()
	return string(b)
}

// The job sends the request line, waits past the peek's first wait, then
// names another host: the proxy must judge the Host that finally comes
// (or refuse), never let the request through with no name.
func TestSlowHostDenied(t *testing.T) {
	w, addr, dst := vhostWorld(t, Config{PeekTimeout: 100 * time.Millisecond})
	c := w.connect(addr, dst)
	io.WriteString(c, "GET / HTTP/1.1\r\n")
	time.Sleep(400 * time.Millisecond)
	io.WriteString(c, "Host: denied.example\r\nConnection: close\r\n\r\n")
	if got := answer(t, c); strings.Contains(got, "vhost denied.example") || !strings.Contains(got, "403") {
		t.Errorf("got %q, want a 403 and nothing from denied.example", got)
	}
	if got := lastLog(t, w, 1); got.Allow || got.Upstream != "" {
		t.Errorf("log %+v", got)
	}
	if len(w.dialled()) != 0 {
		t.Errorf("dialled %q", w.dialled())
	}
}

// A head that never ends within HeadTimeout is refused, not let through
// without a name.
func TestUnfinishedHeadDenied(t *testing.T) {
	w, addr, dst := vhostWorld(t, Config{PeekTimeout: 100 * time.Millisecond, HeadTimeout: 300 * time.Millisecond})
	c := w.connect(addr, dst)
	io.WriteString(c, "GET / HTTP/1.1\r\nUser-Agent: x\r\n")
	if got := answer(t, c); !strings.Contains(got, "403") || !strings.Contains(got, "did not end within") {
		t.Errorf("got %q", got)
	}
	if got := lastLog(t, w, 1); got.Allow || len(w.dialled()) != 0 {
		t.Errorf("log %+v, dialled %q", got, w.dialled())
	}
}

// Nothing within PeekTimeout makes a connection server-first; the job's
// first bytes are still judged when they come, before any reach upstream.
func TestServerFirstThenHTTPDenied(t *testing.T) {
	w, addr, dst := vhostWorld(t, Config{PeekTimeout: 100 * time.Millisecond})
	c := w.connect(addr, dst)
	time.Sleep(400 * time.Millisecond)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: denied.example\r\nConnection: close\r\n\r\n")
	if got := answer(t, c); strings.Contains(got, "vhost denied.example") {
		t.Errorf("the late request reached denied.example: %q", got)
	}
	got := lastLog(t, w, 1)
	if got.Allow || got.Host != "denied.example" || !strings.Contains(got.Reason, `asked for "denied.example"`) {
		t.Errorf("log %+v", got)
	}

	// The same, naming the host it looked up, goes through.
	c = w.connect(addr, dst)
	time.Sleep(300 * time.Millisecond)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n")
	if got := answer(t, c); !strings.Contains(got, "vhost api.example.com") {
		t.Errorf("a late request naming the looked-up host: %q", got)
	}
}

// Requests a server reads as naming another host, though they do not look
// like the GET the peek knew: each is judged or refused, none reaches
// denied.example.
func TestHTTPFormsJudged(t *testing.T) {
	for _, req := range []string{
		"\r\nGET / HTTP/1.1\r\nHost: denied.example\r\nConnection: close\r\n\r\n",     // a leading empty line
		"\r\n\r\nGET / HTTP/1.1\r\nHost: denied.example\r\nConnection: close\r\n\r\n", // two
		"PROPFIND / HTTP/1.1\r\nHost: denied.example\r\nConnection: close\r\n\r\n",    // a method the peek did not list
		"GET / HTTP/1.1\r\nHost:\r\n denied.example\r\nConnection: close\r\n\r\n",     // a folded header
		"GET ws://denied.example/ HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n",
		"GET / HTTP/1.1\nHost: denied.example\nConnection: close\n\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	} {
		t.Run(strings.Fields(req)[0], func(t *testing.T) {
			w, addr, dst := vhostWorld(t, Config{})
			c := w.connect(addr, dst)
			io.WriteString(c, req)
			if got := answer(t, c); strings.Contains(got, "vhost denied.example") || strings.Contains(got, "vhost") {
				t.Errorf("%q reached upstream: %q", req, got)
			}
			if got := lastLog(t, w, 1); got.Allow {
				t.Errorf("%q: log %+v", req, got)
			}
		})
	}
}

// slowConn sends its first write's first byte, pauses, then the rest: a
// ClientHello that dribbles in.
type slowConn struct {
	net.Conn
	pause time.Duration
	first bool
}

func (c *slowConn) Write(b []byte) (int, error) {
	if c.first || len(b) < 2 {
		return c.Conn.Write(b)
	}
	c.first = true
	if _, err := c.Conn.Write(b[:1]); err != nil {
		return 0, err
	}
	time.Sleep(c.pause)
	n, err := c.Conn.Write(b[1:])
	return n + 1, err
}

// tlsWorld is a proxy for a step allowed api.example.com:443, which
// resolves to a TLS server whose certificate also covers denied.example.
func tlsWorld(t *testing.T, c Config) (*world, string, string) {
	w := newWorld(t)
	cert, _ := selfSigned(t, "api.example.com", "denied.example")
	w.tlsUpstream("203.0.113.10:443", cert)
	w.hosts["api.example.com"] = []netip.Addr{netip.MustParseAddr("203.0.113.10")}
	m := egress.NewMapper()
	dst := mapped(t, m, "api.example.com", 443)
	c.Rules, c.Mapper = rules(t, []string{"api.example.com:443"}, nil), m
	_, addr := w.start(c)
	return w, addr, dst
}

// handshake runs a TLS client for serverName over c and returns the
// server's first line ("tls hello <SNI>") or the error.
func handshake(c net.Conn, cfg *tls.Config) (string, error) {
	tc := tls.Client(c, cfg)
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	defer tc.Close()
	if err := tc.Handshake(); err != nil {
		return "", err
	}
	return bufio.NewReader(tc).ReadString('\n')
}

// One byte of the ClientHello, a pause past PeekTimeout, then the rest
// naming another host: judged when it is complete, so denied.
func TestSlowClientHelloDenied(t *testing.T) {
	w, addr, dst := tlsWorld(t, Config{PeekTimeout: 100 * time.Millisecond})
	c := &slowConn{Conn: w.connect(addr, dst), pause: 400 * time.Millisecond}
	if line, err := handshake(c, &tls.Config{ServerName: "denied.example", InsecureSkipVerify: true}); err == nil {
		t.Fatalf("the handshake naming denied.example succeeded: %q", line)
	}
	got := lastLog(t, w, 1)
	if got.Allow || got.SNI != "denied.example" || len(w.dialled()) != 0 {
		t.Errorf("log %+v, dialled %q", got, w.dialled())
	}
}

// bigProtos pads a ClientHello past one TLS record (16 KiB) with ALPN
// names; "http/1.1" is among them, so a server can agree on one.
func bigProtos(n int) []string {
	out := []string{"http/1.1"}
	for i := 0; len(out) < n; i++ {
		out = append(out, fmt.Sprintf("%03d%s", i, strings.Repeat("p", 252)))
	}
	return out
}

// A ClientHello of 17 KiB and more spans two records: it is reassembled
// and judged (here: it names another host, so denied), and one that names
// the looked-up host goes through.
func TestBigClientHello(t *testing.T) {
	w, addr, dst := tlsWorld(t, Config{})
	protos := bigProtos(70) // 70 * 256 bytes: some 17.5 KiB
	if line, err := handshake(w.connect(addr, dst), &tls.Config{ServerName: "denied.example", InsecureSkipVerify: true, NextProtos: protos}); err == nil {
		t.Fatalf("the big handshake naming denied.example succeeded: %q", line)
	}
	got := lastLog(t, w, 1)
	if got.Allow || got.SNI != "denied.example" || len(w.dialled()) != 0 {
		t.Errorf("log %+v, dialled %q", got, w.dialled())
	}
	if line, err := handshake(w.connect(addr, dst), &tls.Config{ServerName: "api.example.com", InsecureSkipVerify: true, NextProtos: protos}); err != nil || line != "tls hello api.example.com\n" {
		t.Errorf("the big handshake naming api.example.com: %q %v", line, err)
	}
	if got := lastLog(t, w, 2); !got.Allow || got.SNI != "api.example.com" {
		t.Errorf("log %+v", got)
	}
	// Past the bound (MaxClientHello), refused.
	if _, err := handshake(w.connect(addr, dst), &tls.Config{ServerName: "api.example.com", InsecureSkipVerify: true, NextProtos: bigProtos(200)}); err == nil {
		t.Error("a 50 KiB ClientHello was let through")
	}
	if got := lastLog(t, w, 3); got.Allow || !strings.Contains(got.Reason, "longer than") {
		t.Errorf("log %+v", got)
	}
}
