package dns

import (
	"encoding/binary"
	"testing"

	mdns "github.com/miekg/dns"

	"github.com/agentsandbox/agentsandbox/egress"
)

// FuzzServeMsg feeds arbitrary bytes to the message handler: it never
// panics, and whatever it answers is one DNS response to the same ID.
func FuzzServeMsg(f *testing.F) {
	for _, m := range []*mdns.Msg{
		query("example.com.", mdns.TypeA),
		query("a.github.com.", mdns.TypeAAAA),
		query("4.0.19.198.in-addr.arpa.", mdns.TypePTR),
		query("1.0.19.198.in-addr.arpa.", mdns.TypePTR),
		query(".", mdns.TypeNS),
	} {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
		m.SetEdns0(4096, true)
		b, err = m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, true)
	}
	f.Add([]byte{}, true)
	f.Add([]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1}, true)

	rules, err := egress.NewRules(testAllow, testDeny)
	if err != nil {
		f.Fatal(err)
	}
	s := &Server{Step: "fuzz", Rules: rules, Mapper: egress.NewMapper(), MaxLogged: 1, Log: func(q egress.Query) {
		if q.Type != "dns" || q.Step != "fuzz" {
			f.Errorf("log line %+v", q)
		}
	}}
	s.Mapper.Map("example.com") // 198.19.0.1, for the PTR seeds
	f.Fuzz(func(t *testing.T, b []byte, udp bool) {
		out := s.answer(b, udp)
		if out == nil {
			return
		}
		if len(out) < 12 || binary.BigEndian.Uint16(out) != binary.BigEndian.Uint16(b) || out[2]&0x80 == 0 {
			t.Fatalf("reply %x to %x is not a response with the query's ID", out, b)
		}
		if udp && len(out) > ednsSize {
			t.Fatalf("UDP reply of %d bytes, more than %d", len(out), ednsSize)
		}
		r := new(mdns.Msg)
		if err := r.Unpack(out); err != nil {
			t.Fatalf("reply %x does not unpack: %v", out, err)
		}
		if len(r.Answer) > 1 {
			t.Fatalf("reply has %d answers, want at most one", len(r.Answer))
		}
	})
}
