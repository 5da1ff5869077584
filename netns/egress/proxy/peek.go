package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"
)

// The bounds of what the proxy reads of a connection before it decides
// (docs/network.md). A ClientHello or an HTTP/1 request head that does
// not fit them, or does not arrive whole within Config.HeadTimeout of its
// first byte, is refused: a connection whose destination name cannot be
// read is never let through as one that named none.
const (
	// MaxClientHello bounds a TLS ClientHello: its handshake message
	// (header and body), and the payloads of all the records it spans
	// together. Real clients send 0.5 to 3 KiB; post-quantum key shares
	// and long ALPN or session ticket lists stay well under this.
	MaxClientHello = 32 << 10
	// MaxHelloRecords bounds how many TLS records a ClientHello may be
	// split over.
	MaxHelloRecords = 256
	// MaxRequestHead bounds an HTTP/1 request head: any empty lines
	// before it, its request line and its headers, up to the empty line.
	MaxRequestHead = 32 << 10
	// maxPeek is the most peek reads.
	maxPeek = max(MaxClientHello+5*MaxHelloRecords, MaxRequestHead)
)

// The kinds of first bytes.
const (
	kindNone  = ""     // nothing arrived (server-first protocol)
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
	// bad is set when the first bytes are a ClientHello or a request head
	// whose host the proxy cannot tell: malformed, contradicting itself
	// (two Host headers, a Host and an absolute URL naming different
	// hosts), past the bounds, or not complete in time. Such a
	// connection is denied.
	bad string
}

var errNeedMore = errors.New("need more bytes")

// peek reads from c until its first bytes say what they are. It waits
// first for the first byte (nothing by then: kindNone), then at most head
// more for the rest of a ClientHello or request head. A read error or
// end of input before that is complete, like the bounds, makes the peek
// bad. The deadline is cleared after.
func peek(c net.Conn, first, head time.Duration) peeked {
	_ = c.SetReadDeadline(time.Now().Add(first))
	defer c.SetReadDeadline(time.Time{})
	p, _ := peekFrom(c, c.SetReadDeadline, head)
	return p
}

// peekFrom is peek from the first read of r on, under the deadline r's
// connection has; setDeadline sets it to head after the first byte. When
// nothing arrived, err is the read's error (a deadline, the end).
func peekFrom(r io.Reader, setDeadline func(time.Time) error, head time.Duration) (p peeked, err error) {
	buf := make([]byte, 0, 4096)
	for {
		if len(buf) == cap(buf) {
			if cap(buf) >= maxPeek {
				p.bad = p.tooLong()
				break
			}
			grown := make([]byte, len(buf), min(2*cap(buf), maxPeek))
			copy(grown, buf)
			buf = grown
		}
		m, rerr := r.Read(buf[len(buf):cap(buf)])
		if m > 0 {
			if len(buf) == 0 {
				_ = setDeadline(time.Now().Add(head))
			}
			buf = buf[:len(buf)+m]
			if classify(buf, &p) {
				break
			}
		}
		if rerr != nil {
			switch {
			case len(buf) == 0:
				err = rerr
			case errors.Is(rerr, io.EOF):
				p.ended(buf)
			default:
				p.bad = p.unfinished(rerr, head)
			}
			break
		}
	}
	p.data = buf[:len(buf):len(buf)]
	return p, err
}

// what names the kind of first bytes for a message.
func (p *peeked) what() string {
	if p.kind == kindTLS {
		return "the TLS ClientHello"
	}
	return "the HTTP request head"
}

func (p *peeked) tooLong() string {
	if p.kind == kindTLS {
		return fmt.Sprintf("the TLS ClientHello is longer than %d KiB", MaxClientHello>>10)
	}
	p.kind = kindHTTP
	return fmt.Sprintf("the HTTP request head is longer than %d KiB", MaxRequestHead>>10)
}

func (p *peeked) unfinished(err error, head time.Duration) string {
	if p.kind == "" {
		p.kind = kindHTTP // only a request line keeps classify waiting
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Sprintf("%s did not end within %s of its first byte", p.what(), head)
	}
	return fmt.Sprintf("reading %s failed: %v", p.what(), err)
}

// ended judges first bytes the client ended (a FIN) before a ClientHello
// or request head was complete. Nothing can follow them, so no server
// reads a whole ClientHello or request from them: they go upstream as
// they are, but the host any complete header line of theirs names is
// still judged.
func (p *peeked) ended(b []byte) {
	if p.kind != kindHTTP {
		p.kind = kindOther
		return
	}
	start, _, _ := requestLine(b)
	head := b[start:]
	if i := bytes.LastIndexByte(head, '\n'); i >= 0 {
		head = head[:i+1]
	}
	p.host, p.bad = httpHost(head)
}

// classify looks at what has arrived so far and reports whether it is
// enough to stop reading.
func classify(b []byte, p *peeked) bool {
	if b[0] == 0x16 {
		p.kind = kindTLS
		sni, err := parseClientHello(b)
		switch {
		case errors.Is(err, errNeedMore):
			return false
		case err != nil:
			p.bad = fmt.Sprintf("the TLS ClientHello cannot be read: %v", err)
		default:
			p.sni = sni
		}
		return true
	}
	if bytes.HasPrefix(b, proxyV1) || bytes.HasPrefix(b, proxyV2) {
		p.kind = kindOther
		p.bad = "the connection starts with a PROXY protocol header, with which a job could claim another source address and put the request's host out of the proxy's sight; connect without one"
		return true
	}
	if len(b) < len(proxyV2) && bytes.HasPrefix(proxyV2, b) {
		return false
	}
	start, line, more := requestLine(b)
	switch {
	case more && len(b) < MaxRequestHead:
		return false
	case more:
		p.bad = p.tooLong()
		return true
	case line == "":
		p.kind = kindOther
		return true
	}
	p.kind = kindHTTP
	end := headEnd(b, start)
	switch {
	case end < 0 && len(b) < MaxRequestHead:
		return false
	case end < 0 || end > MaxRequestHead:
		p.bad = p.tooLong()
		return true
	}
	p.host, p.bad = httpHost(b[start:end])
	return true
}

// The PROXY protocol's headers (HAProxy's v1 text line and v2 signature).
var (
	proxyV1 = []byte("PROXY ")
	proxyV2 = []byte("\r\n\r\n\x00\r\nQUIT\n")
)

// requestLine finds an HTTP/1 request line at the start of b, after any
// empty lines (which servers skip, RFC 9112 2.2): "METHOD SP target SP
// HTTP/x.y", the method any token. It returns where the line starts and
// the line, "" when b does not start with one, or more when b ends before
// it can tell.
func requestLine(b []byte) (start int, line string, more bool) {
	for start < len(b) && (b[start] == '\r' || b[start] == '\n') {
		start++
	}
	i := start
	for i < len(b) && isTokenChar(b[i]) {
		i++
	}
	if i == len(b) {
		return start, "", true
	}
	if i == start || b[i] != ' ' {
		return start, "", false
	}
	for ; i < len(b); i++ {
		c := b[i]
		if c == '\n' {
			l := strings.TrimSuffix(string(b[start:i]), "\r")
			f := strings.Fields(l)
			if len(f) < 2 || !strings.HasPrefix(strings.ToUpper(f[len(f)-1]), "HTTP/") {
				return start, "", false
			}
			return start, l, false
		}
		if c < ' ' && c != '\t' && c != '\r' || c == 0x7f {
			return start, "", false // a control byte: not a request line
		}
	}
	return start, "", true
}

// isTokenChar reports whether c may be in an HTTP token (RFC 9110 5.6.2).
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// headEnd returns the end of the request head that begins at start of b
// (just past its empty line, a line that is "" or "\r"), or -1 when it
// has not all arrived. Lines end at LF, as servers read them.
func headEnd(b []byte, start int) int {
	for i := start; i < len(b); {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		if line := b[i : i+j]; i > start && (len(line) == 0 || len(line) == 1 && line[0] == '\r') {
			return i + j + 1
		}
		i += j + 1
	}
	return -1
}

// httpHost returns the host an HTTP/1 request head names: its Host header
// or its absolute-form target's authority (the CONNECT target's, for
// CONNECT). bad says why the head is ambiguous, when it is: a server
// could read another host from it than the proxy would.
func httpHost(head []byte) (host, bad string) {
	lines := strings.Split(strings.ReplaceAll(string(head), "\r\n", "\n"), "\n")
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) == 0 {
		return "", "the HTTP request has no request line"
	}
	f := strings.Fields(lines[0])
	if len(f) != 3 {
		return "", fmt.Sprintf("the HTTP request line %q is not METHOD TARGET VERSION", clip(lines[0]))
	}
	method, target := f[0], f[1]
	if method == "PRI" && target == "*" {
		return "", "the connection speaks HTTP/2 without TLS (prior knowledge), whose host is in frames the egress proxy does not read; use HTTP/1.1 or TLS"
	}
	var hosts []string
	for _, l := range lines[1:] {
		if l != "" && (l[0] == ' ' || l[0] == '\t') {
			return "", "the HTTP request folds a header over two lines (obsolete line folding), which servers read differently"
		}
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			return "", fmt.Sprintf("the HTTP request has a header line without ':' (%q)", clip(l))
		}
		if strings.EqualFold(strings.TrimSpace(k), "host") {
			hosts = append(hosts, strings.TrimSpace(v))
		}
	}
	if len(hosts) > 1 {
		return "", "the HTTP request has more than one Host header"
	}
	if len(hosts) == 1 {
		host = hostOnly(hosts[0])
	}
	if auth, ok := targetAuthority(method, target); ok {
		a := hostOnly(auth)
		if host != "" && a != host {
			return "", fmt.Sprintf("the HTTP request's target names %q and its Host header %q", a, host)
		}
		host = a
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

// targetAuthority is the authority a request target names: CONNECT's
// host:port, or an absolute URI's (any scheme: servers take the host of
// "ws://host/" as they take that of "http://host/"), without userinfo.
func targetAuthority(method, target string) (string, bool) {
	if method == "CONNECT" {
		return target, true
	}
	scheme, rest, ok := strings.Cut(target, "://")
	if !ok || scheme == "" || strings.ContainsFunc(scheme, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.')
	}) {
		return "", false
	}
	auth, _, _ := strings.Cut(rest, "/")
	auth, _, _ = strings.Cut(auth, "?")
	auth, _, _ = strings.Cut(auth, "#")
	if i := strings.LastIndexByte(auth, '@'); i >= 0 {
		auth = auth[i+1:]
	}
	return auth, true
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

// maxRecord is the TLSPlaintext.length limit.
const maxRecord = 16384

// parseClientHello reads the TLS records at the start of b, reassembles
// the handshake message they carry and returns the ClientHello's
// server_name ("" when it has none). It returns errNeedMore when b ends
// before the ClientHello does, and another error when b is not a
// ClientHello a TLS client would send or passes MaxClientHello or
// MaxHelloRecords. It never reads outside b.
func parseClientHello(b []byte) (string, error) {
	var hs []byte
	for records := 1; ; records++ {
		if records > MaxHelloRecords {
			return "", fmt.Errorf("the ClientHello spans more than %d TLS records", MaxHelloRecords)
		}
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
		if len(hs)+n > MaxClientHello {
			return "", fmt.Errorf("the ClientHello is longer than %d KiB", MaxClientHello>>10)
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
		if 4+mlen > MaxClientHello {
			return "", fmt.Errorf("the ClientHello of %d bytes is longer than %d KiB", 4+mlen, MaxClientHello>>10)
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
