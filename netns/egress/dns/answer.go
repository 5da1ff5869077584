package dns

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/agentsandbox/agentsandbox/egress"
)

// TTL is the time to live of every record the server gives: the mapping
// lasts as long as the step, so the value only bounds a client's cache.
const TTL = 60

// ednsSize is the UDP payload size the server offers a client that speaks
// EDNS (the size DNS flag day 2020 settled on).
const ednsSize = 1232

// answer returns the reply to one message, packed, or nil to drop it
// (it is no query). It logs the query once. udp says whether the reply
// must fit the client's UDP payload size.
func (s *Server) answer(b []byte, udp bool) []byte {
	q := egress.Query{Type: "dns", Time: time.Now().UTC(), Step: s.Step}
	if len(b) < 12 {
		q.Reason = fmt.Sprintf("dropped a %d-byte message: shorter than a DNS header (12 bytes)", len(b))
		s.log(q)
		return nil
	}
	id := binary.BigEndian.Uint16(b[0:2])
	flags := binary.BigEndian.Uint16(b[2:4])
	if flags&(1<<15) != 0 {
		// Answering a response could start a loop between two servers.
		q.Reason = "dropped a DNS response sent to the step's resolver: it answers queries only"
		s.log(q)
		return nil
	}
	req := new(mdns.Msg)
	if err := req.Unpack(b); err != nil {
		q.Rcode = rcodeName(mdns.RcodeFormatError)
		q.Reason = fmt.Sprintf("malformed DNS message (%v); send a standard query (one question, class IN)", err)
		s.log(q)
		return headerOnly(id, flags, mdns.RcodeFormatError)
	}

	resp := new(mdns.Msg)
	resp.SetReply(req)
	resp.RecursionAvailable = true
	resp.Compress = true
	size := mdns.MinMsgSize
	if opt := req.IsEdns0(); opt != nil {
		resp.SetEdns0(ednsSize, false)
		size = max(int(min(opt.UDPSize(), ednsSize)), mdns.MinMsgSize)
	}
	if len(req.Question) > 0 {
		q.Name = canonical(req.Question[0].Name)
		q.QType = mdns.Type(req.Question[0].Qtype).String()
	}
	switch opt := req.IsEdns0(); {
	case req.Opcode != mdns.OpcodeQuery:
		resp.Rcode = mdns.RcodeNotImplemented
		q.Reason = fmt.Sprintf("opcode %s is not implemented; the step's resolver answers standard queries (QUERY) only", opcodeName(req.Opcode))
	case len(req.Question) != 1:
		resp.Rcode = mdns.RcodeFormatError
		resp.Question = nil
		q.Reason = fmt.Sprintf("%d questions in one message; ask exactly one question per message", len(req.Question))
	case req.Question[0].Qclass != mdns.ClassINET:
		resp.Rcode = mdns.RcodeFormatError
		q.Reason = fmt.Sprintf("class %s; the step's resolver answers class IN only", mdns.Class(req.Question[0].Qclass))
	case opt != nil && opt.Version() != 0:
		resp.Rcode = mdns.RcodeBadVers
		q.Reason = fmt.Sprintf("EDNS version %d; the step's resolver speaks EDNS version 0", opt.Version())
	default:
		s.resolve(resp, req.Question[0], &q)
	}
	if udp {
		resp.Truncate(size)
	}
	out, err := resp.Pack()
	if err != nil {
		q.Rcode = rcodeName(mdns.RcodeServerFailure)
		q.Answer = ""
		q.Reason = fmt.Sprintf("could not pack the answer (%v); this is a bug in the step's resolver", err)
		s.log(q)
		return headerOnly(id, flags, mdns.RcodeServerFailure)
	}
	q.Rcode = rcodeName(resp.Rcode)
	s.log(q)
	return out
}

// resolve answers one class IN question from the rules alone.
func (s *Server) resolve(resp *mdns.Msg, qn mdns.Question, q *egress.Query) {
	name := q.Name
	if strings.HasSuffix(name, ".in-addr.arpa") {
		if a, ok := reverse4(name); ok {
			if host, ok := s.Mapper.Name(a); ok {
				q.Reason = fmt.Sprintf("the step's resolver gave %s to %q", a, host)
				if qn.Qtype == mdns.TypePTR {
					resp.Answer = append(resp.Answer, &mdns.PTR{
						Hdr: mdns.RR_Header{Name: qn.Name, Rrtype: mdns.TypePTR, Class: mdns.ClassINET, Ttl: TTL},
						Ptr: mdns.Fqdn(host),
					})
					q.Answer = host
				}
				return
			}
		}
		resp.Rcode = mdns.RcodeNameError
		q.Reason = "not an address the step's resolver gave out; it answers reverse lookups of its own addresses only"
		return
	}
	if !hostName(name) {
		resp.Rcode = mdns.RcodeNameError
		q.Reason = fmt.Sprintf("%q is not a host name (letters, digits, '-' and '_' in dot-separated labels); network.allow can name only host names", name)
		return
	}
	rs := s.rules()
	rule, ok := rs.ResolveRule(name)
	if !ok {
		resp.Rcode = mdns.RcodeNameError
		q.Reason = nxReason(rs, name, rule)
		return
	}
	q.Reason = fmt.Sprintf("network.allow %q", rule.Entry)
	if qn.Qtype != mdns.TypeA {
		q.Reason += "; the name exists, but the step's resolver gives A records only"
		return
	}
	a, err := s.Mapper.Map(name)
	if err != nil {
		resp.Rcode = mdns.RcodeServerFailure
		q.Reason = fmt.Sprintf("network.allow %q, but %v; a step may look up at most %d distinct names, so list fewer names below its wildcard entries", rule.Entry, err, mappedAddrs())
		return
	}
	resp.Answer = append(resp.Answer, &mdns.A{
		Hdr: mdns.RR_Header{Name: qn.Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: TTL},
		A:   a.AsSlice(),
	})
	q.Answer = a.String()
}

// nxReason says why name gets NXDOMAIN: rule is the deny rule that names
// it, or the zero Rule.
func nxReason(rs *egress.Rules, name string, rule egress.Rule) string {
	if rule.Entry != "" {
		return fmt.Sprintf("forbidden by the policy (data.agentsandbox.egress_deny %q); no network.allow entry can open it", rule.Entry)
	}
	add := fmt.Sprintf("to allow it, add %q to the step's network.allow (PORT: the port the step connects to)", name+":PORT")
	for _, r := range rs.Allow {
		if r.Wildcard && r.Host == name {
			return fmt.Sprintf("network.allow %q names the names below %s, not %s itself; %s", r.Entry, name, name, add)
		}
	}
	return "no network.allow entry names it; " + add
}

// canonical is the name as logged and judged: lowercase, without the
// trailing dot ("." for the root).
func canonical(name string) string {
	if name == "." || name == "" {
		return "."
	}
	return strings.TrimSuffix(strings.ToLower(name), ".")
}

// hostName reports whether name (canonical) is a host name: labels of
// letters, digits, '-' and '_', none empty or longer than 63.
func hostName(name string) bool {
	if name == "." || name == "" {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// reverse4 reads an IPv4 reverse name ("4.3.2.1.in-addr.arpa").
func reverse4(name string) (netip.Addr, bool) {
	rest, ok := strings.CutSuffix(name, ".in-addr.arpa")
	if !ok {
		return netip.Addr{}, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 4 {
		return netip.Addr{}, false
	}
	slices.Reverse(parts)
	a, err := netip.ParseAddr(strings.Join(parts, "."))
	if err != nil || !a.Is4() {
		return netip.Addr{}, false
	}
	return a, true
}

// headerOnly is a reply of just a header: the request's ID, opcode and
// RD bit, and rcode (below 16).
func headerOnly(id, reqFlags uint16, rcode int) []byte {
	out := make([]byte, 12)
	binary.BigEndian.PutUint16(out[0:2], id)
	flags := uint16(1<<15) | reqFlags&(0xf<<11) | reqFlags&(1<<8) | uint16(rcode&0xf)
	binary.BigEndian.PutUint16(out[2:4], flags)
	return out
}

func rcodeName(rc int) string {
	if s, ok := mdns.RcodeToString[rc]; ok {
		return s
	}
	return fmt.Sprintf("RCODE%d", rc)
}

func opcodeName(op int) string {
	if s, ok := mdns.OpcodeToString[op]; ok {
		return s
	}
	return fmt.Sprintf("OPCODE%d", op)
}

// mappedAddrs is how many addresses egress.MappedPrefix holds for names.
func mappedAddrs() int {
	return 1<<(egress.MappedPrefix.Addr().BitLen()-egress.MappedPrefix.Bits()) - 2
}
