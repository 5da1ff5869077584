package proxy

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// clientHello returns the first flight a crypto/tls client sends for
// serverName.
func clientHello(t testing.TB, serverName string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		c := tls.Client(a, &tls.Config{ServerName: serverName, InsecureSkipVerify: true})
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
	// The handshake message split over several records.
	hs := hello[5:]
	for _, size := range []int{1, 3, 50, 512} {
		if name, err := parseClientHello(records(hs, size)); err != nil || name != "api.example.com" {
			t.Errorf("records of %d: %q %v", size, name, err)
		}
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
	} {
		host, bad := httpHost([]byte(tc.head))
		if host != tc.host || (tc.bad == "") != (bad == "") || !strings.Contains(bad, tc.bad) {
			t.Errorf("%q: %q %q, want %q %q", tc.head, host, bad, tc.host, tc.bad)
		}
	}
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
	p := peek(b, time.Second)
	if p.kind != kindTLS || p.sni != "api.example.com" || string(p.data) != string(hello) {
		t.Errorf("kind %q sni %q, %d of %d bytes", p.kind, p.sni, len(p.data), len(hello))
	}

	a2, b2 := net.Pipe()
	defer a2.Close()
	go a2.Write([]byte("SSH-2.0-OpenSSH\r\n"))
	start := time.Now()
	p = peek(b2, 5*time.Second)
	if p.kind != kindOther || string(p.data) != "SSH-2.0-OpenSSH\r\n" || time.Since(start) > 2*time.Second {
		t.Errorf("%+v after %s", p, time.Since(start))
	}

	a3, b3 := net.Pipe() // server-first: nothing comes
	defer a3.Close()
	p = peek(b3, 50*time.Millisecond)
	if p.kind != kindNone || len(p.data) != 0 {
		t.Errorf("%+v", p)
	}
	go func() { io.WriteString(a3, "later") }()
	buf := make([]byte, 5)
	if _, err := io.ReadFull(b3, buf); err != nil { // the deadline was cleared
		t.Errorf("read after peek: %v", err)
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
