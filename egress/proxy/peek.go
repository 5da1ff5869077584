package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// maxPeek bounds what is read from a client before deciding: one full TLS
// record (16 KiB of payload and its header) or an HTTP request head.
const maxPeek = 5 + 16384

// The kinds of first bytes.
const (
	kindNone  = ""     // nothing arrived (server-first protocol) or nothing recognised
	kindTLS   = "tls"  // a TLS handshake record
	kindHTTP  = "http" // an HTTP/1 request line
	kindOther = "other"
)

// peeked is what the first bytes of a connection said.
type peeked struct {
	data []byte // every byte read, to send upstream first
	kind string
	sni  string // TLS server_name, lowercase, no trailing dot
	host string // HTTP Host (or absolute-form authority), lowercase, no port
	// bad is set when the first bytes are recognised but contradict
	// themselves (two Host headers, a Host and an absolute URL naming
	// different hosts): such a request is denied.
	bad string
}

var errNeedMore = errors.New("need more bytes")

// peek reads from c until the first bytes say what they are, the buffer
// is full, the client stops sending for timeout, or the read fails (the
// copy after will see the same end).
func peek(c net.Conn, timeout time.Duration) peeked {
	var p peeked
	buf := make([]byte, maxPeek)
	n := 0
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	defer c.SetReadDeadline(time.Time{})
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		n += m
		if m > 0 && classify(buf[:n], &p) {
			break
		}
		if err != nil {
			break
		}
	}
	p.data = buf[:n:n]
	if p.kind == "" && n > 0 {
		p.kind = kindOther
	}
	return p
}

// classify looks at what has arrived so far and reports whether it is
// enough to stop reading.
func classify(b []byte, p *peeked) bool {
	switch {
	case b[0] == 0x16:
		p.kind = kindTLS
		sni, err := parseClientHello(b)
		if errors.Is(err, errNeedMore) {
			return false
		}
		if err == nil {
			p.sni = sni
		}
		return true
	case looksLikeHTTP(b):
		p.kind = kindHTTP
		end := headEnd(b)
		if end < 0 {
			return false
		}
		p.host, p.bad = httpHost(b[:end])
		return true
	default:
		if len(b) < 8 && isHTTPMethodPrefix(b) {
			return false // "GE" of "GET ": wait for more
		}
		p.kind = kindOther
		return true
	}
}

var httpMethods = []string{"GET ", "HEAD ", "POST ", "PUT ", "DELETE ", "OPTIONS ", "PATCH ", "TRACE ", "CONNECT "}

func looksLikeHTTP(b []byte) bool {
	for _, m := range httpMethods {
		if bytes.HasPrefix(b, []byte(m)) {
			return true
		}
	}
	return false
}

func isHTTPMethodPrefix(b []byte) bool {
	for _, m := range httpMethods {
		if strings.HasPrefix(m, string(b)) {
			return true
		}
	}
	return false
}

// headEnd returns the length of the request head ending in an empty
// line, or -1 when it has not all arrived.
func headEnd(b []byte) int {
	if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
		return i + 4
	}
	if i := bytes.Index(b, []byte("\n\n")); i >= 0 {
		return i + 2
	}
	return -1
}

// httpHost returns the host an HTTP/1 request head names: its Host header
// or its absolute-form target's authority. bad says why the head is
// ambiguous, when it is.
func httpHost(head []byte) (host, bad string) {
	lines := strings.Split(strings.ReplaceAll(string(head), "\r\n", "\n"), "\n")
	var target string
	if f := strings.Fields(lines[0]); len(f) == 3 {
		target = f[1]
	}
	var hosts []string
	for _, l := range lines[1:] {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.EqualFold(strings.TrimSpace(k), "host") {
			hosts = append(hosts, strings.TrimSpace(v))
		}
	}
	if len(hosts) > 1 {
		return "", "the HTTP request has more than one Host header"
	}
	if len(hosts) == 1 {
		host = hostOnly(hosts[0])
	}
	lt := strings.ToLower(target)
	for _, scheme := range []string{"http://", "https://"} {
		if rest, ok := strings.CutPrefix(lt, scheme); ok {
			auth, _, _ := strings.Cut(rest, "/")
			auth, _, _ = strings.Cut(auth, "?")
			if i := strings.LastIndexByte(auth, '@'); i >= 0 {
				auth = auth[i+1:]
			}
			a := hostOnly(auth)
			if host != "" && a != host {
				return "", fmt.Sprintf("the HTTP request's target names %q and its Host header %q", a, host)
			}
			host = a
		}
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			if _, err := checkHostName([]byte(host)); err != nil {
				return "", fmt.Sprintf("the HTTP request names %q, which is not a host name", clip(host))
			}
		}
	}
	return host, ""
}

// clip shortens what a client sent for a message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// hostOnly lowercases an authority and drops its port and trailing dot.
func hostOnly(a string) string {
	a = strings.ToLower(strings.TrimSpace(a))
	if strings.HasPrefix(a, "[") {
		if end := strings.IndexByte(a, ']'); end > 0 {
			return a[1:end]
		}
		return a
	}
	if h, _, ok := strings.Cut(a, ":"); ok {
		a = h
	}
	return strings.TrimSuffix(a, ".")
}

// Limits of the ClientHello parser.
const (
	maxRecord = 16384 // TLSPlaintext.length limit
	maxHello  = maxPeek
)

// parseClientHello reads the TLS records at the start of b, reassembles
// the handshake message they carry and returns the ClientHello's
// server_name ("" when it has none). It returns errNeedMore when b ends
// before the ClientHello does, and another error when b is not a
// ClientHello a TLS client would send. It never reads outside b.
func parseClientHello(b []byte) (string, error) {
	var hs []byte
	for {
		if len(b) < 5 {
			return "", errNeedMore
		}
		if b[0] != 0x16 {
			return "", errors.New("not a TLS handshake record")
		}
		if b[1] != 3 {
			return "", errors.New("not TLS record version 3.x")
		}
		n := int(b[3])<<8 | int(b[4])
		if n == 0 || n > maxRecord {
			return "", fmt.Errorf("TLS record length %d out of range", n)
		}
		if len(b) < 5+n {
			return "", errNeedMore
		}
		hs = append(hs, b[5:5+n]...)
		b = b[5+n:]
		if len(hs) < 4 {
			continue
		}
		if hs[0] != 1 {
			return "", errors.New("TLS handshake is not a ClientHello")
		}
		mlen := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
		if mlen > maxHello {
			return "", fmt.Errorf("ClientHello of %d bytes is too long", mlen)
		}
		if len(hs) >= 4+mlen {
			return parseHelloBody(hs[4 : 4+mlen])
		}
	}
}

// reader is a bounds-checked cursor.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) bytes(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.bad = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() int {
	v := r.bytes(1)
	if v == nil {
		return 0
	}
	return int(v[0])
}

func (r *reader) u16() int {
	v := r.bytes(2)
	if v == nil {
		return 0
	}
	return int(v[0])<<8 | int(v[1])
}

// vec reads a vector with a length prefix of 1 or 2 bytes.
func (r *reader) vec(prefix int) *reader {
	var n int
	if prefix == 1 {
		n = r.u8()
	} else {
		n = r.u16()
	}
	return &reader{b: r.bytes(n), bad: r.bad}
}

var errMalformed = errors.New("malformed ClientHello")

func parseHelloBody(body []byte) (string, error) {
	r := &reader{b: body}
	r.bytes(2)  // legacy_version
	r.bytes(32) // random
	if sid := r.vec(1); len(sid.b) > 32 {
		return "", errMalformed
	}
	if cs := r.vec(2); len(cs.b)%2 != 0 || len(cs.b) == 0 {
		return "", errMalformed
	}
	if cm := r.vec(1); len(cm.b) == 0 {
		return "", errMalformed
	}
	if r.bad {
		return "", errMalformed
	}
	if len(r.b) == 0 {
		return "", nil // no extensions
	}
	exts := r.vec(2)
	if r.bad || len(r.b) != 0 {
		return "", errMalformed
	}
	var name string
	seen := false
	for len(exts.b) > 0 && !exts.bad {
		typ := exts.u16()
		data := exts.vec(2)
		if exts.bad {
			return "", errMalformed
		}
		if typ != 0 { // server_name
			continue
		}
		if seen {
			return "", errors.New("ClientHello has two server_name extensions")
		}
		seen = true
		list := data.vec(2)
		if data.bad || len(data.b) != 0 {
			return "", errMalformed
		}
		for len(list.b) > 0 {
			nt := list.u8()
			v := list.vec(2)
			if list.bad || v.bad {
				return "", errMalformed
			}
			if nt != 0 { // host_name
				continue
			}
			if name != "" {
				return "", errors.New("ClientHello names two hosts")
			}
			n, err := checkHostName(v.b)
			if err != nil {
				return "", err
			}
			name = n
		}
	}
	if exts.bad {
		return "", errMalformed
	}
	return name, nil
}

// checkHostName accepts a DNS host name (letters, digits, '-', '_', '.';
// at most 253 bytes) and returns it lowercase without a trailing dot.
func checkHostName(b []byte) (string, error) {
	s := strings.TrimSuffix(strings.ToLower(string(b)), ".")
	if s == "" || len(s) > 253 {
		return "", errors.New("server_name is empty or too long")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return "", fmt.Errorf("server_name has byte %#x, not a host name", c)
		}
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return "", errors.New("server_name is an address, not a host name")
	}
	return s, nil
}
