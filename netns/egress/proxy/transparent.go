package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
)

// handleTransparent handles one redirected connection (package doc,
// steps 1-6).
func (p *Proxy) handleTransparent(s *session) {
	dst, err := p.c.OriginalDst(s.client)
	if err != nil {
		s.deny(egress.Decision{Reason: fmt.Sprintf("the egress proxy could not learn where the connection was going (%v); is the step's firewall redirecting to this listener?", err)})
		reset(s.client)
		return
	}
	s.rec.Dst = dst.String()
	addr, port := dst.Addr().Unmap(), dst.Port()
	if local, err := netip.ParseAddrPort(s.client.LocalAddr().String()); err == nil && local.Addr().Unmap() == addr && local.Port() == port {
		// Not redirected: conntrack reports the listener itself. Dialling
		// it would loop back into the proxy.
		s.deny(egress.Decision{Reason: fmt.Sprintf("the connection came straight to the egress proxy's listener %s (its original destination is the listener itself), not through the step's firewall redirect; connect to the destination, not to the proxy", dst)})
		reset(s.client)
		return
	}
	var name string
	if egress.IsResolverAddr(addr) {
		n, ok := "", false
		if p.c.Mapper != nil {
			n, ok = p.c.Mapper.Name(addr)
		}
		if !ok {
			s.deny(egress.Decision{Reason: fmt.Sprintf("%s is in the step resolver's private range %s but the resolver never gave it out; look the name up through the step's resolver (%s) instead of using an address from elsewhere", addr, egress.MappedPrefix, egress.Gateway)})
			reset(s.client)
			return
		}
		name = n
		s.rec.Name, s.rec.NameSource = name, egress.FromDNS
	}

	src := egress.FromNone
	if name != "" {
		src = egress.FromDNS
	}
	pk := peek(s.client, p.c.PeekTimeout, p.c.HeadTimeout)
	s.rec.Decision = p.judge(s, pk, name, src, addr, port)
	if !s.rec.Allow {
		if pk.kind == kindHTTP {
			forbidden(s.client, s.rec.Decision)
			s.client.Close()
			return
		}
		reset(s.client)
		return
	}
	if !s.connect(name, addr, port) {
		if pk.kind == kindHTTP {
			writeStatus(s.client, "502 Bad Gateway", s.rec.Error)
			s.client.Close()
			return
		}
		reset(s.client)
		return
	}
	s.pipe(p.firstBytes(s, s.client, pk, name, src, addr, port), false)
}

// judge decides a connection from what its first bytes said, with the
// name it was given (by the step's resolver, or in a CONNECT), "" for
// none, and its address and port (addr invalid for a CONNECT to a name).
// It notes the SNI or Host in the audit line.
func (p *Proxy) judge(s *session, pk peeked, name string, src egress.NameSource, addr netip.Addr, port uint16) egress.Decision {
	if pk.sni != "" {
		s.rec.SNI = pk.sni
	}
	if pk.host != "" {
		s.rec.Host = pk.host
	}
	if pk.bad != "" {
		return egress.Decision{Reason: pk.bad + "; the egress proxy lets a connection through only once it has read, within its bounds, the name the connection goes to: send the whole ClientHello or request head at once, with one Host header that agrees with the request's target"}
	}
	claimed, csrc := pk.sni, egress.FromSNI
	if claimed == "" {
		claimed, csrc = pk.host, egress.FromHost
	}
	what := "its TLS server name (SNI)"
	if csrc == egress.FromHost {
		what = "its HTTP Host header"
	}
	switch {
	case name != "" && claimed != "" && claimed != name && src == egress.FromConnect:
		return egress.Decision{Reason: fmt.Sprintf("the job opened a tunnel to %q (CONNECT) and then asked for %q in %s inside it; a tunnel may only go to the name it was opened for: open one to %q", name, claimed, what, claimed)}
	case name != "" && claimed != "" && claimed != name:
		return egress.Decision{Reason: fmt.Sprintf("the job looked up %q and then asked for %q in %s on that connection; a connection may only go to the name it looked up: look %q up and connect to its own address", name, claimed, what, claimed)}
	case name != "":
		return p.c.Live.Load().Decide(egress.Request{Name: name, NameSource: src, Addr: addr, Port: port})
	}
	if claimed != "" {
		s.rec.Name, s.rec.NameSource = claimed, csrc
	}
	return decideByAddr(p.c.Live.Load(), addr, port, claimed, csrc)
}

// errRefused ends the job's side of a connection whose late first bytes
// were denied (firstBytes).
var errRefused = errors.New("the connection's first bytes were denied")

// firstBytes is what the job sends upstream on an allowed connection:
// the bytes peeked, then the rest. When nothing came within PeekTimeout
// (a server-first protocol, or a job waiting on purpose) the job's first
// bytes, whenever they come, are peeked and judged like any connection's
// before one of them goes upstream (gate).
func (p *Proxy) firstBytes(s *session, c io.Reader, pk peeked, name string, src egress.NameSource, addr netip.Addr, port uint16) io.Reader {
	if len(pk.data) > 0 {
		return io.MultiReader(bytes.NewReader(pk.data), c)
	}
	if pk.kind != kindNone {
		return c
	}
	return &gate{r: c, set: s.client.SetReadDeadline, head: p.c.HeadTimeout, idle: p.c.IdleTimeout,
		judge: func(pk peeked) bool {
			d := p.judge(s, pk, name, src, addr, port)
			if !d.Allow {
				s.rec.Decision = d
			}
			return d.Allow
		}}
}

// gate holds back what the job sends on a server-first connection until
// its first bytes are judged; a denial ends the connection.
type gate struct {
	r          io.Reader
	set        func(time.Time) error
	head, idle time.Duration
	judge      func(peeked) bool
	rest       io.Reader
}

func (g *gate) Read(b []byte) (int, error) {
	if g.rest != nil {
		return g.rest.Read(b)
	}
	pk, err := peekFrom(g.r, g.set, g.head)
	if len(pk.data) == 0 {
		return 0, err // nothing yet: the copy's idle timeout decides
	}
	if !g.judge(pk) {
		return 0, errRefused
	}
	_ = g.set(time.Now().Add(g.idle))
	g.rest = io.MultiReader(bytes.NewReader(pk.data), g.r)
	return g.rest.Read(b)
}

// decideByAddr judges a connection to an address the step's resolver did
// not give: by CIDR rules alone. The name the client claimed (in SNI or
// Host) can only make it forbidden (a deny entry names it), never allowed.
func decideByAddr(rs *egress.Rules, addr netip.Addr, port uint16, claimed string, src egress.NameSource) egress.Decision {
	d := rs.Decide(egress.Request{Addr: addr, Port: port})
	if claimed == "" {
		return d
	}
	dn := rs.Decide(egress.Request{Name: claimed, NameSource: src, Addr: addr, Port: port})
	switch {
	case !dn.Allow && dn.Rule != "":
		return dn // forbidden by name or address
	case !d.Allow && !dn.Allow:
		return dn // the same default deny, saying why the name did not count
	case !d.Allow:
		d.Reason = fmt.Sprintf("%s (the job named %q in its %s, but a connection to an address the step's resolver did not give is judged by its address alone: look the name up through the step's resolver)", d.Reason, claimed, src)
	}
	return d
}
