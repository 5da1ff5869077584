package proxy

import (
	"bufio"
	"crypto/tls"
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

func TestAllowedByDNSNameTLS(t *testing.T) {
	w := newWorld(t)
	cert, pool := selfSigned(t, "api.example.com")
	w.tlsUpstream("203.0.113.10:443", cert)
	w.hosts["api.example.com"] = []netip.Addr{netip.MustParseAddr("203.0.113.10")}
	m := egress.NewMapper()
	dst := mapped(t, m, "api.example.com", 443)
	_, addr := w.start(Config{Rules: rules(t, []string{"api.example.com:443"}, nil), Mapper: m})

	c := tls.Client(w.connect(addr, dst), &tls.Config{ServerName: "api.example.com", RootCAs: pool})
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "tls hello api.example.com\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	c.Close()
	got := lastLog(t, w, 1)
	if !got.Allow || got.Rule != "api.example.com:443" || got.Name != "api.example.com" || got.NameSource != egress.FromDNS ||
		got.SNI != "api.example.com" || got.Upstream != "203.0.113.10:443" || got.Dst != dst || got.Step != "build" || got.Type != "conn" {
		t.Errorf("log %+v", got)
	}
	if got.BytesOut == 0 || got.BytesIn == 0 || got.Error != "" {
		t.Errorf("bytes %d/%d error %q", got.BytesOut, got.BytesIn, got.Error)
	}
}

func TestAllowedByWildcardHTTP(t *testing.T) {
	w := newWorld(t)
	w.httpUpstream("203.0.113.11:80")
	w.hosts["www.example.com"] = []netip.Addr{netip.MustParseAddr("203.0.113.11")}
	m := egress.NewMapper()
	dst := mapped(t, m, "www.example.com", 80)
	p, addr := w.start(Config{Rules: rules(t, []string{"*.example.com"}, nil), Mapper: m})

	code, body := httpGet(t, w.connect(addr, dst), "www.example.com", "/x")
	if code != 200 || body != "hello www.example.com /x" {
		t.Fatalf("%d %q", code, body)
	}
	got := lastLog(t, w, 1)
	if !got.Allow || got.Rule != "*.example.com" || got.Host != "www.example.com" || got.NameSource != egress.FromDNS {
		t.Errorf("log %+v", got)
	}
	if st := p.Stats(); st.Allowed != 1 || st.Denied != 0 || st.BytesOut != got.BytesOut || st.BytesIn != got.BytesIn {
		t.Errorf("stats %+v, log %+v", st, got)
	}
}

func TestAllowedByCIDRRecordsHost(t *testing.T) {
	w := newWorld(t)
	w.httpUpstream("203.0.113.20:80")
	_, addr := w.start(Config{Rules: rules(t, []string{"203.0.113.0/24:80"}, nil)})

	code, body := httpGet(t, w.connect(addr, "203.0.113.20:80"), "anything.test", "/")
	if code != 200 || body != "hello anything.test /" {
		t.Fatalf("%d %q", code, body)
	}
	got := lastLog(t, w, 1)
	if !got.Allow || got.Rule != "203.0.113.0/24:80" || got.Host != "anything.test" || got.Upstream != "203.0.113.20:80" {
		t.Errorf("log %+v", got)
	}
	if d := w.dialled(); len(d) != 1 || d[0] != "203.0.113.20:80" {
		t.Errorf("dialled %q", d)
	}
}

func TestDefaultDenyWithHint(t *testing.T) {
	w := newWorld(t)
	m := egress.NewMapper()
	dst := mapped(t, m, "other.org", 80)
	p, addr := w.start(Config{Rules: rules(t, []string{"api.example.com"}, nil), Mapper: m})

	code, body := httpGet(t, w.connect(addr, dst), "other.org", "/")
	if code != 403 || !strings.Contains(body, `"other.org:80"`) {
		t.Errorf("%d %q", code, body)
	}
	got := lastLog(t, w, 1)
	if got.Allow || got.Hint != "other.org:80" || got.Name != "other.org" {
		t.Errorf("log %+v", got)
	}
	if len(w.dialled()) != 0 {
		t.Errorf("a denied connection dialled %q", w.dialled())
	}
	if st := p.Stats(); st.Denied != 1 || st.Allowed != 0 {
		t.Errorf("stats %+v", st)
	}
}

// A name in SNI never allows a connection to an address the job dialled
// directly.
func TestRealAddressNotAllowedBySNI(t *testing.T) {
	w := newWorld(t)
	cert, _ := selfSigned(t, "api.example.com")
	w.tlsUpstream("192.0.2.7:443", cert)
	_, addr := w.start(Config{Rules: rules(t, []string{"api.example.com"}, nil)})

	c := tls.Client(w.connect(addr, "192.0.2.7:443"), &tls.Config{ServerName: "api.example.com", InsecureSkipVerify: true})
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.Handshake(); err == nil {
		t.Fatal("handshake through a denied connection succeeded")
	}
	got := lastLog(t, w, 1)
	if got.Allow || got.SNI != "api.example.com" || got.Hint != "192.0.2.7:443" || !strings.Contains(got.Reason, "judged by its address alone") {
		t.Errorf("log %+v", got)
	}
	if len(w.dialled()) != 0 {
		t.Errorf("dialled %q", w.dialled())
	}
}

func TestDenyList(t *testing.T) {
	w := newWorld(t)
	m := egress.NewMapper()
	dst := mapped(t, m, "evil.example.com", 80)
	_, addr := w.start(Config{Rules: rules(t, []string{"*.example.com"}, []string{"evil.example.com"}), Mapper: m})
	code, body := httpGet(t, w.connect(addr, dst), "evil.example.com", "/")
	if code != 403 || !strings.Contains(body, "forbidden by the policy") {
		t.Errorf("%d %q", code, body)
	}
	if got := lastLog(t, w, 1); got.Allow || got.Rule != "evil.example.com" {
		t.Errorf("log %+v", got)
	}
}

// A deny entry matching the name a real-address connection claims
// forbids it even though a CIDR rule allows the address.
func TestDenyListByClaimedName(t *testing.T) {
	w := newWorld(t)
	w.httpUpstream("203.0.113.20:80")
	_, addr := w.start(Config{Rules: rules(t, []string{"203.0.113.0/24"}, []string{"evil.example.com"})})
	code, _ := httpGet(t, w.connect(addr, "203.0.113.20:80"), "evil.example.com", "/")
	if code != 403 {
		t.Errorf("status %d, want 403", code)
	}
	if len(w.dialled()) != 0 {
		t.Errorf("dialled %q", w.dialled())
	}
}

func TestSNIMismatchDenied(t *testing.T) {
	w := newWorld(t)
	cert, _ := selfSigned(t, "api.example.com", "evil.com")
	w.tlsUpstream("203.0.113.10:443", cert)
	w.hosts["api.example.com"] = []netip.Addr{netip.MustParseAddr("203.0.113.10")}
	m := egress.NewMapper()
	dst := mapped(t, m, "api.example.com", 443)
	_, addr := w.start(Config{Rules: rules(t, []string{"api.example.com", "evil.com"}, nil), Mapper: m})

	raw := w.connect(addr, dst)
	c := tls.Client(raw, &tls.Config{ServerName: "evil.com", InsecureSkipVerify: true})
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.Handshake(); err == nil {
		t.Fatal("handshake with a contradicting SNI succeeded")
	}
	got := lastLog(t, w, 1)
	if got.Allow || got.SNI != "evil.com" || !strings.Contains(got.Reason, `looked up "api.example.com" and then asked for "evil.com"`) {
		t.Errorf("log %+v", got)
	}
	if len(w.dialled()) != 0 {
		t.Errorf("dialled %q", w.dialled())
	}
}

func TestHostMismatchDenied(t *testing.T) {
	w := newWorld(t)
	m := egress.NewMapper()
	dst := mapped(t, m, "api.example.com", 80)
	_, addr := w.start(Config{Rules: rules(t, []string{"api.example.com", "evil.com"}, nil), Mapper: m})
	code, body := httpGet(t, w.connect(addr, dst), "evil.com:80", "/")
	if code != 403 || !strings.Contains(body, "HTTP Host header") {
		t.Errorf("%d %q", code, body)
	}
	if got := lastLog(t, w, 1); got.Allow || got.Host != "evil.com" {
		t.Errorf("log %+v", got)
	}
}

func TestUnknownMappedAddressDenied(t *testing.T) {
	w := newWorld(t)
	_, addr := w.start(Config{Rules: rules(t, []string{"api.example.com"}, nil), Mapper: egress.NewMapper()})
	expectClosed(t, w.connect(addr, "198.19.0.77:443"))
	if got := lastLog(t, w, 1); got.Allow || !strings.Contains(got.Reason, "never gave it out") {
		t.Errorf("log %+v", got)
	}
}

func TestTwoHostHeadersDenied(t *testing.T) {
	w := newWorld(t)
	m := egress.NewMapper()
	dst := mapped(t, m, "api.example.com", 80)
	_, addr := w.start(Config{Rules: rules(t, []string{"api.example.com"}, nil), Mapper: m})
	c := w.connect(addr, dst)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: api.example.com\r\nHost: evil.com\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 403 {
		t.Fatalf("%v %v", resp, err)
	}
}

// An upstream that speaks first (SMTP, MySQL, ...) works: the peek gives
// up after PeekTimeout and the connection carries on with the DNS name.
func TestServerFirstProtocol(t *testing.T) {
	w := newWorld(t)
	w.upstream("203.0.113.25:25", func(c net.Conn) {
		io.WriteString(c, "220 mail ready\r\n")
		line, _ := bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, "250 got "+line)
	})
	w.hosts["mail.example.com"] = []netip.Addr{netip.MustParseAddr("203.0.113.25")}
	m := egress.NewMapper()
	dst := mapped(t, m, "mail.example.com", 25)
	_, addr := w.start(Config{Rules: rules(t, []string{"mail.example.com:25"}, nil), Mapper: m, PeekTimeout: 100 * time.Millisecond})

	c := w.connect(addr, dst)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	if l, err := r.ReadString('\n'); err != nil || l != "220 mail ready\r\n" {
		t.Fatalf("greeting %q %v", l, err)
	}
	io.WriteString(c, "HELO x\r\n")
	if l, err := r.ReadString('\n'); err != nil || l != "250 got HELO x\r\n" {
		t.Fatalf("answer %q %v", l, err)
	}
	c.Close()
	if got := lastLog(t, w, 1); !got.Allow || got.SNI != "" || got.Host != "" || got.BytesOut != 8 || got.BytesIn != int64(16+len("250 got HELO x\r\n")) {
		t.Errorf("log %+v", got)
	}
}

// An allowed name that resolves (on the host, at dial time) to cloud
// metadata or a private address is refused, and Dial never sees it.
func TestCheckUpstreamRefusesSpecialAddresses(t *testing.T) {
	for _, tc := range []struct{ resolved, want string }{
		{"169.254.169.254", "link-local"},
		{"10.1.2.3", "private"},
	} {
		t.Run(tc.resolved, func(t *testing.T) {
			w := newWorld(t)
			w.hosts["api.example.com"] = []netip.Addr{netip.MustParseAddr(tc.resolved)}
			m := egress.NewMapper()
			dst := mapped(t, m, "api.example.com", 80)
			p, addr := w.start(Config{Rules: rules(t, []string{"api.example.com"}, nil), Mapper: m})
			code, body := httpGet(t, w.connect(addr, dst), "api.example.com", "/")
			if code != 502 || !strings.Contains(body, tc.resolved) {
				t.Errorf("%d %q", code, body)
			}
			got := lastLog(t, w, 1)
			if !got.Allow || got.Upstream != "" || !strings.Contains(got.Error, tc.want) || !strings.Contains(got.Error, tc.resolved) {
				t.Errorf("log %+v", got)
			}
			if len(w.dialled()) != 0 {
				t.Errorf("dialled %q", w.dialled())
			}
			if st := p.Stats(); st.Failed != 1 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// An allowed name whose DNS answer (on the host, at dial time) is the
// host's own address, or an IPv6 form carrying loopback or the host's
// address, is refused: Dial never sees it, though a listener waits there.
func TestUpstreamHostAddressRefused(t *testing.T) {
	for _, tc := range []struct{ resolved, want string }{
		{"192.0.2.200", "192.0.2.200, one of this host's own addresses"},
		{"::ffff:192.0.2.200", "one of this host's own addresses"},
		{"2002:c000:2c8::1", "carries 192.0.2.200, one of this host's own addresses as 6to4"},
		{"64:ff9b::c000:2c8", "as NAT64"},
		{"::7f00:1", "carries 127.0.0.1, a loopback address (127.0.0.0/8) as IPv4-compatible"},
		{"2002:7f00:1::1", "as 6to4"},
		{"2001:0:7f00:1::", "as Teredo (server)"},
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", "carries 127.0.0.1, a loopback address (127.0.0.0/8) as Teredo (client)"},
		{"2001:0:4136:e378:8000:63bf:5601:5601", "carries 169.254.169.254"},
	} {
		t.Run(tc.resolved, func(t *testing.T) {
			w := newWorld(t)
			w.own = []netip.Addr{netip.MustParseAddr("192.0.2.200")}
			a := netip.MustParseAddr(tc.resolved)
			w.httpUpstream(netip.AddrPortFrom(a, 80).String()) // a listener there
			w.hosts["api.example.com"] = []netip.Addr{a}
			m := egress.NewMapper()
			dst := mapped(t, m, "api.example.com", 80)
			_, addr := w.start(Config{Rules: rules(t, []string{"api.example.com:80"}, nil), Mapper: m})
			code, body := httpGet(t, w.connect(addr, dst), "api.example.com", "/")
			if code != 502 || !strings.Contains(body, tc.want) {
				t.Errorf("%d %q, want 502 saying %q", code, body, tc.want)
			}
			if got := lastLog(t, w, 1); got.Upstream != "" || !strings.Contains(got.Error, "data.agentsandbox.egress_internal") {
				t.Errorf("log %+v", got)
			}
			if len(w.dialled()) != 0 {
				t.Errorf("dialled %q", w.dialled())
			}
		})
	}
}

// A step's own rules cannot open loopback, metadata, private ranges or
// the host's addresses, however exactly they name them; the operator's
// egress_internal can.
func TestClientRulesCannotOpenInternal(t *testing.T) {
	for _, tc := range []struct {
		dst, allow string
	}{
		{"127.0.0.1:8080", "127.0.0.1/32:8080"},
		{"169.254.169.254:80", "169.254.169.254/32:80"},
		{"10.1.2.3:5432", "10.0.0.0/8:5432"},
		{"192.0.2.200:22", "192.0.2.200:22"},
		{"[fd00::5]:443", "[fd00::/8]:443"},
	} {
		// Each world's proxy is checked for leftover goroutines when it
		// closes: one world per subtest.
		run := func(name string, allow, internal []string, wantCode int, want string) {
			t.Run(tc.dst+"/"+name, func(t *testing.T) {
				w := newWorld(t)
				w.own = []netip.Addr{netip.MustParseAddr("192.0.2.200")}
				w.httpUpstream(tc.dst)
				rs, err := egress.Operator{Internal: internal}.Rules(allow)
				if err != nil {
					t.Fatal(err)
				}
				_, addr := w.start(Config{Rules: rs})
				code, body := httpGet(t, w.connect(addr, tc.dst), "x.test", "/")
				if code != wantCode || !strings.Contains(body, want) {
					t.Errorf("%d %q, want %d %q", code, body, wantCode, want)
				}
				if dialled := len(w.dialled()) != 0; dialled != (wantCode == 200) {
					t.Errorf("dialled %q", w.dialled())
				}
			})
		}
		run("asked", []string{tc.allow}, nil, 502, "egress_internal")
		run("opened and asked", []string{tc.allow}, []string{tc.allow}, 200, "hello x.test /")
		run("opened, not asked", []string{"other.example:443"}, []string{tc.allow}, 403, "no network.allow entry")
	}
}

// Of several addresses, only acceptable ones are dialled, as literals.
func TestDialOnlyCheckedLiterals(t *testing.T) {
	w := newWorld(t)
	w.httpUpstream("203.0.113.30:8080")
	w.hosts["api.example.com"] = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("203.0.113.99"), netip.MustParseAddr("203.0.113.30")}
	m := egress.NewMapper()
	dst := mapped(t, m, "api.example.com", 8080)
	_, addr := w.start(Config{Rules: rules(t, []string{"api.example.com:8080"}, nil), Mapper: m})
	code, _ := httpGet(t, w.connect(addr, dst), "api.example.com", "/")
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	// 127.0.0.1 refused by CheckUpstream; .99 has nothing listening.
	if d := w.dialled(); len(d) != 2 || d[0] != "203.0.113.99:8080" || d[1] != "203.0.113.30:8080" {
		t.Errorf("dialled %q", d)
	}
	if got := lastLog(t, w, 1); got.Upstream != "203.0.113.30:8080" {
		t.Errorf("log %+v", got)
	}
}

func TestBytesCountedBothWays(t *testing.T) {
	const up, down = 300000, 123456
	w := newWorld(t)
	w.upstream("203.0.113.40:9000", func(c net.Conn) {
		n, _ := io.CopyN(io.Discard, c, up)
		if n == up {
			c.Write(make([]byte, down))
		}
	})
	p, addr := w.start(Config{Rules: rules(t, []string{"203.0.113.40"}, nil)})
	c := w.connect(addr, "203.0.113.40:9000")
	c.SetDeadline(time.Now().Add(10 * time.Second))
	go c.Write(append([]byte("binary"), make([]byte, up-6)...))
	n, err := io.Copy(io.Discard, c)
	if err != nil || n != down {
		t.Fatalf("read %d, %v", n, err)
	}
	c.Close()
	got := lastLog(t, w, 1)
	if got.BytesOut != up || got.BytesIn != down || got.Error != "" {
		t.Errorf("log %+v", got)
	}
	if st := p.Stats(); st.BytesOut != up || st.BytesIn != down {
		t.Errorf("stats %+v", st)
	}
}

// Half-close: the job's FIN reaches upstream, whose answer still comes back.
func TestHalfClose(t *testing.T) {
	w := newWorld(t)
	w.upstream("203.0.113.41:7", func(c net.Conn) {
		b, _ := io.ReadAll(c) // until the job's FIN
		c.Write([]byte(strings.ToUpper(string(b))))
	})
	_, addr := w.start(Config{Rules: rules(t, []string{"203.0.113.41"}, nil)})
	c := w.connect(addr, "203.0.113.41:7")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "shout")
	c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "SHOUT" {
		t.Fatalf("%q %v", b, err)
	}
}

func TestIdleTimeout(t *testing.T) {
	w := newWorld(t)
	w.upstream("203.0.113.42:7", func(c net.Conn) { io.Copy(io.Discard, c) })
	_, addr := w.start(Config{Rules: rules(t, []string{"203.0.113.42"}, nil), IdleTimeout: 300 * time.Millisecond, PeekTimeout: 50 * time.Millisecond})
	c := w.connect(addr, "203.0.113.42:7")
	start := time.Now()
	expectClosed(t, c)
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("closed after %s, before the idle timeout", d)
	}
	if got := lastLog(t, w, 1); !strings.Contains(got.Error, "idle timeout") {
		t.Errorf("log %+v", got)
	}
}

func TestMaxConns(t *testing.T) {
	w := newWorld(t)
	w.upstream("203.0.113.43:7", func(c net.Conn) { io.WriteString(c, "hi\n"); io.Copy(io.Discard, c) })
	p, addr := w.start(Config{Rules: rules(t, []string{"203.0.113.43"}, nil), MaxConns: 1, PeekTimeout: 50 * time.Millisecond})
	c1 := w.connect(addr, "203.0.113.43:7")
	c1.SetDeadline(time.Now().Add(5 * time.Second))
	if l, err := bufio.NewReader(c1).ReadString('\n'); err != nil || l != "hi\n" {
		t.Fatalf("%q %v", l, err)
	}
	c2 := w.connect(addr, "203.0.113.43:7")
	expectClosed(t, c2)
	got := lastLog(t, w, 1)
	if got.Allow || !strings.Contains(got.Reason, "1 connections open") || got.Dst != "203.0.113.43:7" {
		t.Errorf("log %+v", got)
	}
	if st := p.Stats(); st.Denied != 1 {
		t.Errorf("stats %+v", st)
	}
	c1.Close()
	w.waitLogs(2)
	c3 := w.connect(addr, "203.0.113.43:7") // room again
	c3.SetDeadline(time.Now().Add(5 * time.Second))
	if l, err := bufio.NewReader(c3).ReadString('\n'); err != nil || l != "hi\n" {
		t.Fatalf("after the first closed: %q %v", l, err)
	}
}

// Close ends listeners and live connections, waits for them, and every
// connection has been logged when it returns.
func TestCloseEndsEverything(t *testing.T) {
	w := newWorld(t)
	w.upstream("203.0.113.44:7", func(c net.Conn) { io.WriteString(c, "hi\n"); io.Copy(io.Discard, c) })
	m := egress.NewMapper()
	p, addr := w.start(Config{Rules: rules(t, []string{"203.0.113.44"}, nil), Mapper: m, PeekTimeout: 50 * time.Millisecond})
	el, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	edone := make(chan error, 1)
	go func() { edone <- p.ServeEndpoint(el) }()
	var conns []net.Conn
	for i := 0; i < 5; i++ {
		c := w.connect(addr, "203.0.113.44:7")
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if l, err := bufio.NewReader(c).ReadString('\n'); err != nil || l != "hi\n" {
			t.Fatalf("%q %v", l, err)
		}
		conns = append(conns, c)
	}
	idle, err := net.Dial("tcp", el.Addr().String()) // sends nothing
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	time.Sleep(50 * time.Millisecond)
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return within 5s")
	}
	if n := len(w.logged()); n != 6 {
		t.Errorf("%d log lines when Close returned, want 6", n)
	}
	for _, c := range conns {
		expectClosed(t, c)
	}
	if err := <-edone; err != ErrClosed {
		t.Errorf("ServeEndpoint: %v", err)
	}
	if err := p.ServeTransparent(el); err != ErrClosed {
		t.Errorf("ServeTransparent after Close: %v", err)
	}
	p.Close() // idempotent
	checkNoGoroutines(t)
}

func TestRealOriginalDstRefusesUnredirected(t *testing.T) {
	// Without a firewall redirect there is no conntrack entry to ask: the
	// proxy must deny, not guess.
	p := New(Config{Step: "s", Rules: rules(t, []string{"127.0.0.1"}, nil)})
	var logged []egress.Conn
	p.c.Log = func(c egress.Conn) { logged = append(logged, c) }
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.ServeTransparent(l)
	c, err := net.Dial("tcp", l.Addr().String())
	if err == nil { // or the reset came before connect returned
		expectClosed(t, c)
	}
	p.Close()
	// Without conntrack getsockopt fails; with it, the answer is the
	// listener itself. Either way: denied, never dialled.
	if len(logged) != 1 || logged[0].Allow || !strings.Contains(logged[0].Reason, "original destination") {
		t.Errorf("logged %+v", logged)
	}
}
