package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/netip"

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

	pk := peek(s.client, p.c.PeekTimeout)
	s.rec.SNI, s.rec.Host = pk.sni, pk.host
	refuse := func() {
		if pk.kind == kindHTTP {
			forbidden(s.client, s.rec.Decision)
			s.client.Close()
			return
		}
		reset(s.client)
	}
	if pk.bad != "" {
		s.deny(egress.Decision{Reason: pk.bad + "; the egress proxy refuses a request whose host it cannot tell: send one Host header that names the host and agrees with the request's target"})
		refuse()
		return
	}
	claimed, src := pk.sni, egress.FromSNI
	if claimed == "" {
		claimed, src = pk.host, egress.FromHost
	}

	var d egress.Decision
	if name != "" {
		if claimed != "" && claimed != name {
			what := "its TLS server name (SNI)"
			if src == egress.FromHost {
				what = "its HTTP Host header"
			}
			s.deny(egress.Decision{Reason: fmt.Sprintf("the job looked up %q and then asked for %q in %s on that connection; a connection may only go to the name it looked up: look %q up and connect to its own address", name, claimed, what, claimed)})
			refuse()
			return
		}
		d = p.c.Live.Load().Decide(egress.Request{Name: name, NameSource: egress.FromDNS, Addr: addr, Port: port})
	} else {
		d = decideByAddr(p.c.Live.Load(), addr, port, claimed, src)
		if claimed != "" {
			s.rec.Name, s.rec.NameSource = claimed, src
		}
	}
	s.rec.Decision = d
	if !d.Allow {
		refuse()
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
	var from io.Reader = s.client
	if len(pk.data) > 0 {
		from = io.MultiReader(bytes.NewReader(pk.data), s.client)
	}
	s.pipe(from, false)
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
