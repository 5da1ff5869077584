package proxy

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
)

// maxHead bounds an endpoint request's head (request line and headers).
const maxHead = 32 << 10

// hopHeaders are the proxy's own and the connection's, never forwarded.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Upgrade"}

// handleEndpoint handles one client of the HTTP proxy endpoint.
func (p *Proxy) handleEndpoint(s *session) {
	lr := &io.LimitedReader{R: s.client, N: maxHead}
	br := bufio.NewReaderSize(lr, 4096)
	_ = s.client.SetReadDeadline(time.Now().Add(headTimeout))
	req, err := http.ReadRequest(br)
	_ = s.client.SetReadDeadline(time.Time{})
	exhausted := lr.N == 0
	lr.N = math.MaxInt64
	if err != nil {
		why := fmt.Sprintf("could not read an HTTP proxy request (%v); send CONNECT host:port or an absolute http:// URL, with a head under %d KiB", err, maxHead>>10)
		if exhausted {
			why = fmt.Sprintf("the request head did not end within %d KiB; send a smaller request", maxHead>>10)
		}
		s.deny(egress.Decision{Reason: why})
		writeStatus(s.client, "400 Bad Request", why)
		return
	}
	defer req.Body.Close()

	var host string
	var port uint16
	connect := req.Method == http.MethodConnect
	switch {
	case connect:
		h, ps, ok := splitHostPort(req.RequestURI)
		if !ok {
			why := fmt.Sprintf("CONNECT %q: want CONNECT host:port", req.RequestURI)
			s.deny(egress.Decision{Reason: why})
			writeStatus(s.client, "400 Bad Request", why)
			return
		}
		host, port = h, ps
	case req.URL.Scheme == "http" && req.URL.Host != "":
		h, ps, ok := splitHostPort(req.URL.Host)
		if !ok {
			h, ps, ok = splitHostPort(req.URL.Host + ":80")
		}
		if !ok {
			why := fmt.Sprintf("%q is not host[:port]", req.URL.Host)
			s.deny(egress.Decision{Reason: why})
			writeStatus(s.client, "400 Bad Request", why)
			return
		}
		host, port = h, ps
	default:
		why := fmt.Sprintf("%s %s: this is the step's HTTP proxy; send CONNECT host:port (for https and any other TCP) or an absolute http:// URL", req.Method, oneLine(req.RequestURI))
		s.deny(egress.Decision{Reason: why})
		writeStatus(s.client, "400 Bad Request", why)
		return
	}
	if !connect {
		s.rec.Host = host
	}

	// Decide: a literal address by CIDR rules (or, for one of the
	// resolver's, by the name it stands for); a name as asked.
	var name string
	var addr netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addr = a.Unmap()
		s.rec.Dst = netip.AddrPortFrom(addr, port).String()
		if egress.IsResolverAddr(addr) {
			n, ok := "", false
			if p.c.Mapper != nil {
				n, ok = p.c.Mapper.Name(addr)
			}
			if !ok {
				why := fmt.Sprintf("%s is in the step resolver's private range %s but the resolver never gave it out; ask for the name instead", addr, egress.MappedPrefix)
				s.deny(egress.Decision{Reason: why})
				writeStatus(s.client, "403 Forbidden", why)
				return
			}
			name = n
			s.rec.Name, s.rec.NameSource = name, egress.FromDNS
			s.rec.Decision = p.c.Live.Load().Decide(egress.Request{Name: name, NameSource: egress.FromDNS, Addr: addr, Port: port})
		} else {
			s.rec.Decision = p.c.Live.Load().Decide(egress.Request{Addr: addr, Port: port})
		}
	} else {
		n, err := checkHostName([]byte(host))
		if err != nil {
			why := fmt.Sprintf("%q is not a host name (%v)", host, err)
			s.deny(egress.Decision{Reason: why})
			writeStatus(s.client, "400 Bad Request", why)
			return
		}
		name = n
		s.rec.Name, s.rec.NameSource = name, egress.FromConnect
		s.rec.Decision = p.c.Live.Load().Decide(egress.Request{Name: name, NameSource: egress.FromConnect, Port: port})
	}
	if !s.rec.Allow {
		forbidden(s.client, s.rec.Decision)
		return
	}
	if !s.connect(name, addr, port) {
		writeStatus(s.client, "502 Bad Gateway", s.rec.Error)
		return
	}

	if connect {
		_ = s.client.SetWriteDeadline(time.Now().Add(p.c.IdleTimeout))
		if _, err := io.WriteString(s.client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			s.rec.Error = err.Error()
			return
		}
		// br holds whatever the client sent after the head. What goes
		// through the tunnel first is judged like a redirected
		// connection's first bytes: a ClientHello or request inside it
		// must name the host the tunnel was opened for.
		src := s.rec.NameSource
		s.pipe(p.firstBytes(s, br, peeked{}, name, src, addr, port), false)
		return
	}

	// Forward the one request, in origin form, asking upstream to close.
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	req.Close = true
	req.RequestURI = ""
	req.Host = "" // the URL's host, which was decided, not a Host header's
	req.Header.Set("Connection", "close")
	w := &meteredWriter{s: s}
	_ = s.client.SetReadDeadline(time.Now().Add(p.c.IdleTimeout))
	err = req.Write(w)
	_ = s.client.SetReadDeadline(time.Time{})
	if err != nil {
		s.rec.Error = fmt.Sprintf("forward the request to %s: %v", s.rec.Upstream, err)
		writeStatus(s.client, "502 Bad Gateway", s.rec.Error)
		return
	}
	s.pipe(br, true)
}

// meteredWriter writes to the session's upstream through the bandwidth
// limit, counting.
type meteredWriter struct{ s *session }

func (m *meteredWriter) Write(b []byte) (int, error) {
	s := m.s
	written := 0
	for len(b) > 0 {
		n := len(b)
		if s.p.out != nil && n > s.p.out.chunk() {
			n = s.p.out.chunk()
		}
		if s.p.out != nil {
			if err := s.p.out.wait(s.ctx, n); err != nil {
				return written, err
			}
		}
		_ = s.up.SetWriteDeadline(time.Now().Add(s.p.c.IdleTimeout))
		k, err := s.up.Write(b[:n])
		written += k
		s.out.Add(int64(k))
		s.p.bytesOut.Add(int64(k))
		if err != nil {
			return written, err
		}
		b = b[n:]
	}
	return written, nil
}

// splitHostPort splits "host:port" or "[v6]:port"; the port must be 1-65535.
func splitHostPort(hp string) (string, uint16, bool) {
	i := strings.LastIndexByte(hp, ':')
	if i <= 0 {
		return "", 0, false
	}
	h, ps := hp[:i], hp[i+1:]
	if strings.HasPrefix(h, "[") {
		if !strings.HasSuffix(h, "]") {
			return "", 0, false
		}
		h = h[1 : len(h)-1]
		if _, err := netip.ParseAddr(h); err != nil {
			return "", 0, false
		}
	} else if strings.Contains(h, ":") {
		return "", 0, false
	}
	n, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || n == 0 || h == "" {
		return "", 0, false
	}
	return strings.TrimSuffix(strings.ToLower(h), "."), uint16(n), true
}
