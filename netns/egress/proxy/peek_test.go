package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// clientHello returns the first flight a crypto/tls client sends for
// serverName.
func clientHello(t testing.TB, serverName string) []byte {
	t.Helper()
	return clientHelloWith(t, &tls.Config{ServerName: serverName, InsecureSkipVerify: true})
}

// clientHelloWith returns the first flight a crypto/tls client with cfg
// sends.
func clientHelloWith(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		c := tls.Client(a, cfg)
		c.Handshake()
	}()
	var buf []byte
	tmp := make([]byte, 4096)
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		n, err := b.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if _, perr := parseClientHello(buf); !errors.Is(perr, errNeedMore) {
			return buf
		}
		if err != nil {
			t.Fatalf("read ClientHello: %v", err)
		}
	}
}

// record wraps handshake bytes in TLS records of at most size bytes each.
func records(hs []byte, size int) []byte {
	var out []byte
	for len(hs) > 0 {
		n := min(size, len(hs))
		out = append(out, 0x16, 3, 1, byte(n>>8), byte(n))
		out = append(out, hs[:n]...)
		hs = hs[n:]
	}
	return out
}

func TestParseClientHello(t *testing.T) {
	hello := clientHello(t, "API.Example.com")
	name, err := parseClientHello(hello)
	if err != nil || name != "api.example.com" {
		t.Fatalf("%q %v", name, err)
	}
	// Every truncation asks for more and never panics.
	for i := 0; i < len(hello); i++ {
		if _, err := parseClientHello(hello[:i]); !errors.Is(err, errNeedMore) {
			t.Fatalf("truncated at %d: %v, want errNeedMore", i, err)
		}
	}
	// The handshake message split over several records, up to
	// MaxHelloRecords of them.
	hs := hello[5:]
	for _, size := range []int{len(hs)/MaxHelloRecords + 1, 8, 50, 512} {
		if name, err := parseClientHello(records(hs, size)); err != nil || name != "api.example.com" {
			t.Errorf("records of %d: %q %v", size, name, err)
		}
	}
	if _, err := parseClientHello(records(hs, 1)); err == nil || !strings.Contains(err.Error(), "more than 256 TLS records") {
		t.Errorf("%d records of 1 byte: %v", len(hs), err)
	}
	// A ClientHello longer than one record (17.5 KiB of ALPN names)
	// spans two, as crypto/tls sends it, and is read whole.
	big := clientHelloWith(t, &tls.Config{ServerName: "big.example.com", NextProtos: bigProtos(70)})
	if len(big) < 17<<10 || big[5+16384] != 0x16 {
		t.Fatalf("the big ClientHello is %d bytes, not two records", len(big))
	}
	if name, err := parseClientHello(big); err != nil || name != "big.example.com" {
		t.Errorf("17.5 KiB ClientHello: %q %v", name, err)
	}
	for i := 0; i < len(big); i += 997 {
		if _, err := parseClientHello(big[:i]); !errors.Is(err, errNeedMore) {
			t.Fatalf("the big one truncated at %d: %v, want errNeedMore", i, err)
		}
	}
	huge := clientHelloWith(t, &tls.Config{ServerName: "big.example.com", NextProtos: bigProtos(200)})
	if _, err := parseClientHello(huge); err == nil || !strings.Contains(err.Error(), "longer than 32 KiB") {
		t.Errorf("50 KiB ClientHello: %v", err)
	}
	// No SNI (an address as server name sends none).
	if name, err := parseClientHello(clientHello(t, "192.0.2.1")); err != nil || name != "" {
		t.Errorf("no SNI: %q %v", name, err)
	}
	for _, bad := range [][]byte{
		{0x17, 3, 1, 0, 1, 0},             // application data
		{0x16, 2, 0, 0, 1, 0},             // SSL 2 record version
		{0x16, 3, 1, 0, 0},                // empty record
		{0x16, 3, 1, 0x50, 0},             // record too long
		{0x16, 3, 1, 0, 4, 2, 0, 0, 0},    // ServerHello
		{0x16, 3, 1, 0, 4, 1, 0xff, 0, 0}, // ClientHello of 16 MiB
		{0x16, 3, 1, 0, 5, 1, 0, 0, 1, 0}, // one byte of body
	} {
		if _, err := parseClientHello(bad); err == nil || errors.Is(err, errNeedMore) {
			t.Errorf("%x: %v, want an error", bad, err)
		}
	}
}

// A server name that is not a host name is refused rather than trusted.
func TestParseClientHelloBadName(t *testing.T) {
	hello := clientHello(t, "aaaa.example.com")
	i := strings.Index(string(hello), "aaaa.example.com")
	for _, b := range []byte{0, '/', ' ', 0xff, '*'} {
		h := append([]byte(nil), hello...)
		h[i+2] = b
		if name, err := parseClientHello(h); err == nil {
			t.Errorf("byte %#x: accepted %q", b, name)
		}
	}
}

func TestHTTPHost(t *testing.T) {
	for _, tc := range []struct{ head, host, bad string }{
		{"GET / HTTP/1.1\r\nHost: Example.COM:8080\r\n\r\n", "example.com", ""},
		{"GET / HTTP/1.1\r\nhost:example.com.\r\n\r\n", "example.com", ""},
		{"GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n", "2001:db8::1", ""},
		{"GET http://a.example/x HTTP/1.1\r\n\r\n", "a.example", ""},
		{"GET http://u:p@a.example:81/x HTTP/1.1\r\nHost: a.example\r\n\r\n", "a.example", ""},
		{"GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n", "", "target names"},
		{"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "", "more than one Host"},
		{"GET / HTTP/1.0\n\n", "", ""},
		{"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", "", "not a host name"},
		{"GET / HTTP/1.1\r\nHost: " + strings.Repeat("x", 300) + "\r\n\r\n", "", "not a host name"},
		{"GET / HTTP/1.1\r\nHost: 192.0.2.1:80\r\n\r\n", "192.0.2.1", ""},
		{"GET / HTTP/1.1\r\nHost:\r\n evil.example\r\n\r\n", "", "folds a header"},
		{"GET / HTTP/1.1\r\nX-A: 1\r\n\tHost: evil.example\r\n\r\n", "", "folds a header"},
		{"GET / HTTP/1.1\r\nHost evil.example\r\n\r\n", "", "without ':'"},
		{"GET / HTTP/1.1\r\nHost : evil.example\r\n\r\n", "evil.example", ""},
		{"GET ws://evil.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", "", "target names"},
		{"GET wss://evil.example:8443/x HTTP/1.1\r\n\r\n", "evil.example", ""},
		{"GET http://evil.example#x/ HTTP/1.1\r\n\r\n", "evil.example", ""},
		{"GET /a://b HTTP/1.1\r\nHost: a.example\r\n\r\n", "a.example", ""},
		{"CONNECT evil.example:443 HTTP/1.1\r\nHost: a.example\r\n\r\n", "", "target names"},
		{"CONNECT evil.example:443 HTTP/1.1\r\n\r\n", "evil.example", ""},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "", "HTTP/2 without TLS"},
		{"GET  /  HTTP/1.1\r\nHost: a.example\r\n\r\n", "a.example", ""},
		{"GET / HTTP/1.1 extra\r\nHost: a.example\r\n\r\n", "", "not METHOD TARGET VERSION"},
	} {
		host, bad := httpHost([]byte(tc.head))
		if host != tc.host || (tc.bad == "") != (bad == "") || !strings.Contains(bad, tc.bad) {
			t.Errorf("%q: %q %q, want %q %q", tc.head, host, bad, tc.host, tc.bad)
		}
	}
}

// pieces writes each piece to a pipe, pausing before each but the first.
func pieces(pause time.Duration, ps ...string) net.Conn {
	a, b := net.Pipe()
	go func() {
		defer a.Close()
		for i, p := range ps {
			if i > 0 {
				time.Sleep(pause)
			}
			if _, err := io.WriteString(a, p); err != nil {
				return
			}
		}
		time.Sleep(time.Hour) // hold the pipe open: no EOF
	}()
	return b
}

// peek reads a ClientHello that arrives in pieces, and stops at once for
// bytes that are neither TLS nor HTTP.
func TestPeek(t *testing.T) {
	hello := clientHello(t, "api.example.com")
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		for _, piece := range [][]byte{hello[:3], hello[3:40], hello[40:]} {
			a.Write(piece)
			time.Sleep(10 * time.Millisecond)
		}
		a.Write([]byte("after"))
	}()
	p := peek(b, time.Second, time.Second)
	if p.kind != kindTLS || p.sni != "api.example.com" || string(p.data) != string(hello) {
		t.Errorf("kind %q sni %q, %d of %d bytes", p.kind, p.sni, len(p.data), len(hello))
	}

	a2, b2 := net.Pipe()
	defer a2.Close()
	go a2.Write([]byte("SSH-2.0-OpenSSH\r\n"))
	start := time.Now()
	p = peek(b2, 5*time.Second, 5*time.Second)
	if p.kind != kindOther || string(p.data) != "SSH-2.0-OpenSSH\r\n" || time.Since(start) > 2*time.Second {
		t.Errorf("%+v after %s", p, time.Since(start))
	}

	a3, b3 := net.Pipe() // server-first: nothing comes
	defer a3.Close()
	p = peek(b3, 50*time.Millisecond, time.Second)
	if p.kind != kindNone || len(p.data) != 0 || p.bad != "" {
		t.Errorf("%+v", p)
	}
	go func() { io.WriteString(a3, "later") }()
	buf := make([]byte, 5)
	if _, err := io.ReadFull(b3, buf); err != nil { // the deadline was cleared
		t.Errorf("read after peek: %v", err)
	}
}

// The peek's bounds: whatever the client sends as a ClientHello or a
// request head is read whole, within HeadTimeout of its first byte and
// the size bounds, or the peek is bad; it is never taken for a
// connection that named no host.
func TestPeekBounds(t *testing.T) {
	hello := string(clientHello(t, "evil.example"))
	big := string(clientHelloWith(t, &tls.Config{ServerName: "evil.example", NextProtos: bigProtos(70)}))
	for _, tc := range []struct {
		name   string
		first  time.Duration
		pieces []string
		kind   string
		host   string // SNI or Host
		bad    string
	}{
		{"slow Host", 50 * time.Millisecond, []string{"GET / HTTP/1.1\r\n", "Host: evil.example\r\n\r\n"}, kindHTTP, "evil.example", ""},
		{"Host past the head timeout", 50 * time.Millisecond, []string{"GET / HTTP/1.1\r\n", "", "", "Host: evil.example\r\n\r\n"}, kindHTTP, "", "did not end within 500ms"},
		{"a method by halves", 50 * time.Millisecond, []string{"GE", "T / HTTP/1.1\r\nHost: evil.example\r\n\r\n"}, kindHTTP, "evil.example", ""},
		{"a method past the head timeout", 50 * time.Millisecond, []string{"GE", "", "", "T / HTTP/1.1\r\n\r\n"}, kindHTTP, "", "did not end within"},
		{"one byte of TLS, then the rest", 50 * time.Millisecond, []string{hello[:1], hello[1:]}, kindTLS, "evil.example", ""},
		{"one byte of TLS, the rest too late", 50 * time.Millisecond, []string{hello[:1], "", "", hello[1:]}, kindTLS, "", "TLS ClientHello did not end within"},
		{"a 17 KiB ClientHello over two records", time.Second, []string{big[:9000], big[9000:]}, kindTLS, "evil.example", ""},
		{"leading empty lines", time.Second, []string{"\r\n\r\n\nGET / HTTP/1.1\r\nHost: evil.example\r\n\r\n"}, kindHTTP, "evil.example", ""},
		{"any method", time.Second, []string{"MKCALENDAR / HTTP/1.1\r\nHost: evil.example\r\n\r\n"}, kindHTTP, "evil.example", ""},
		{"bare LF lines", time.Second, []string{"GET / HTTP/1.1\nHost: evil.example\n\n"}, kindHTTP, "evil.example", ""},
		{"CR LF LF ends the head", time.Second, []string{"GET / HTTP/1.1\r\nHost: evil.example\r\n\n"}, kindHTTP, "evil.example", ""},
		{"an oversized head", time.Second, []string{"GET / HTTP/1.1\r\nX: " + strings.Repeat("a", MaxRequestHead) + "\r\nHost: evil.example\r\n\r\n"}, kindHTTP, "", "longer than 32 KiB"},
		{"an oversized request line", time.Second, []string{"GET /" + strings.Repeat("a", MaxRequestHead)}, kindHTTP, "", "longer than 32 KiB"},
		{"not a request line", time.Second, []string{"SET key value\r\n"}, kindOther, "", ""},
		{"a protocol banner", time.Second, []string{"SSH-2.0-x y\r\n"}, kindOther, "", ""},
		{"binary", time.Second, []string{"\x00\x00\x00\x08\x04\xd2\x16\x2f"}, kindOther, "", ""},
		{"a PROXY header", time.Second, []string{"PROXY TCP4 192.0.2.1 203.0.113.10 1234 80\r\nGET / HTTP/1.1\r\nHost: evil.example\r\n\r\n"}, kindOther, "", "PROXY protocol"},
		{"a PROXY v2 header", time.Second, []string{"\r\n\r\n\x00", "\r\nQUIT\n\x21\x11"}, kindOther, "", "PROXY protocol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The head timeout is 500ms; each piece after the first
			// comes 200ms after the one before it.
			p := peek(pieces(200*time.Millisecond, tc.pieces...), tc.first, 500*time.Millisecond)
			host := p.sni
			if p.kind == kindHTTP {
				host = p.host
			}
			if p.kind != tc.kind || host != tc.host || (tc.bad == "") != (p.bad == "") || !strings.Contains(p.bad, tc.bad) {
				t.Errorf("kind %q host %q bad %q; want %q %q %q", p.kind, host, p.bad, tc.kind, tc.host, tc.bad)
			}
		})
	}
}

// A client that ends its side (FIN) before its ClientHello or head is
// complete: nothing can follow, so the bytes go as they are, but a Host
// in the lines it did send is judged.
func TestPeekEnded(t *testing.T) {
	for _, tc := range []struct{ in, kind, host string }{
		{"shout", kindOther, ""},
		{"\x16\x03\x01\x02", kindOther, ""},
		{"GET / HTTP/1.1\r\nHost: evil.example\r\n", kindHTTP, "evil.example"},
		{"GET / HTTP/1.1\r\nHost: evil.example", kindHTTP, ""},
	} {
		a, b := net.Pipe()
		go func() { io.WriteString(a, tc.in); a.Close() }()
		p := peek(b, time.Second, time.Second)
		if p.kind != tc.kind || p.host != tc.host || p.bad != "" || string(p.data) != tc.in {
			t.Errorf("%q: %+v", tc.in, p)
		}
	}
}

func TestRequestLine(t *testing.T) {
	for _, tc := range []struct {
		in   string
		line string
		more bool
	}{
		{"GET / HTTP/1.1\r\n", "GET / HTTP/1.1", false},
		{"\r\n\nPUT /x HTTP/1.0\n", "PUT /x HTTP/1.0", false},
		{"M-SEARCH * HTTP/1.1\r\n", "M-SEARCH * HTTP/1.1", false},
		{"GET / http/1.1\r\n", "GET / http/1.1", false},
		{"GET", "", true},
		{"\r\n", "", true},
		{"GET / HTTP/1.1", "", true},
		{"GET /\r\n", "", false}, // HTTP/0.9: no headers, no Host
		{"GET \x00 HTTP/1.1\r\n", "", false},
		{" GET / HTTP/1.1\r\n", "", false},
		{"GET(/) HTTP/1.1\r\n", "", false},
		{"\x16\x03", "", false},
	} {
		_, line, more := requestLine([]byte(tc.in))
		if line != tc.line || more != tc.more {
			t.Errorf("requestLine(%q) = %q, %v; want %q, %v", tc.in, line, more, tc.line, tc.more)
		}
	}
}

func FuzzSNI(f *testing.F) {
	hello := clientHello(f, "api.example.com")
	f.Add(hello)
	f.Add(records(hello[5:], 7))
	f.Add(clientHello(f, "192.0.2.1"))
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		name, err := parseClientHello(b)
		if err != nil && name != "" {
			t.Fatalf("error %v with name %q", err, name)
		}
		if err == nil && name != "" {
			if _, err := checkHostName([]byte(name)); err != nil || name != strings.ToLower(name) {
				t.Fatalf("returned %q, not a clean host name", name)
			}
		}
		var p peeked
		if len(b) > 0 {
			classify(b, &p)
		}
		httpHost(b)
	})
}

// peekBytes peeks at b as a client that sends it and ends (FIN) would be,
// in chunks of the sizes sizes gives in turn (all at once when empty).
func peekBytes(b, sizes []byte) peeked {
	r := &chunkReader{b: b, sizes: sizes}
	p, _ := peekFrom(r, func(time.Time) error { return nil }, time.Second)
	return p
}

type chunkReader struct {
	b, sizes []byte
	i        int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := len(r.b)
	if len(r.sizes) > 0 {
		n = int(r.sizes[r.i%len(r.sizes)]) + 1
		r.i++
	}
	n = min(n, len(p), len(r.b))
	copy(p, r.b[:n])
	r.b = r.b[n:]
	return n, nil
}

// FuzzPeekHostAgreesWithServer: whatever a job sends first, when Go's
// own HTTP server would read from it a request naming a host, the peek
// names the same host or refuses (bad): it never lets such a request
// through as naming no host, or another one. However the bytes are
// chunked, the peek says the same.
func FuzzPeekHostAgreesWithServer(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n",
		"\r\nGET / HTTP/1.1\r\nHost: a.example\r\n\r\n",
		"GET http://u@a.example:81/x?y HTTP/1.1\r\nHost: a.example\r\n\r\n",
		"GET ws://a.example/ HTTP/1.1\r\n\r\n",
		"PROPFIND / HTTP/1.1\r\nHost:\r\n b.example\r\n\r\n",
		"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example\r\n\r\n",
		"GET / HTTP/1.1\nHost: [2001:db8::1]:80\n\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"SSH-2.0-x\r\n",
	} {
		f.Add([]byte(s), []byte{3, 0, 200})
	}
	f.Fuzz(func(t *testing.T, b, sizes []byte) {
		if len(b) == 0 {
			return
		}
		p := peekBytes(b, nil)
		if len(p.data) > maxPeek || !bytes.HasPrefix(b, p.data) {
			t.Fatalf("peeked %d bytes, not a prefix of the input within %d", len(p.data), maxPeek)
		}
		q := peekBytes(b, sizes)
		if p.kind != q.kind || p.sni != q.sni || p.host != q.host || (p.bad == "") != (q.bad == "") {
			t.Fatalf("chunked %v: %+v, whole: %+v", sizes, q, p)
		}
		if p.bad != "" || p.kind == kindTLS {
			return
		}
		// net/http's server skips empty lines before a request.
		rest := bytes.TrimLeft(b, "\r\n")
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(rest)))
		if err != nil {
			return
		}
		if h := hostOnly(req.Host); h != "" && (p.kind != kindHTTP || p.host != h) {
			t.Fatalf("the server reads host %q (Host %q), the peek %q (kind %q)", h, req.Host, p.host, p.kind)
		}
	})
}

// serverReadsSNI is the server name crypto/tls's server reads from the
// first flight b, and whether it read a ClientHello at all.
func serverReadsSNI(b []byte) (string, bool) {
	a, c := net.Pipe()
	got := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer c.Close()
		srv := tls.Server(c, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			got <- h.ServerName
			return nil, errors.New("stop here")
		}})
		srv.SetDeadline(time.Now().Add(time.Second))
		srv.Handshake()
	}()
	go func() {
		a.SetDeadline(time.Now().Add(time.Second))
		a.Write(b)
		a.Close() // the end: the server reads no more than b
	}()
	<-done
	select {
	case n := <-got:
		return n, true
	default:
		return "", false
	}
}

// FuzzSNIAgreesWithServer: when crypto/tls's server reads a server name
// from what a job sends first, the peek reads the same one or refuses.
func FuzzSNIAgreesWithServer(f *testing.F) {
	hello := clientHello(f, "api.example.com")
	f.Add(hello)
	f.Add(records(hello[5:], 7))
	f.Add(records(hello[5:], 300))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != 0x16 {
			return
		}
		p := peekBytes(b, nil)
		if p.bad != "" {
			return
		}
		name, ok := serverReadsSNI(b)
		name = strings.TrimSuffix(strings.ToLower(name), ".")
		if ok && name != "" && (p.kind != kindTLS || p.sni != name) {
			t.Fatalf("the server reads SNI %q, the peek %q (kind %q)", name, p.sni, p.kind)
		}
	})
}
