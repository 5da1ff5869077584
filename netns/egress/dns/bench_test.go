package dns

import (
	"net"
	"testing"

	mdns "github.com/miekg/dns"
)

// BenchmarkQueryUDP is one A query and its answer over UDP on loopback,
// on one client socket.
func BenchmarkQueryUDP(b *testing.B) {
	ts := startServer(b, 1)
	benchUDP(b, ts.udp)
}

// BenchmarkQueryUDPBaseline is the same against miekg/dns's own server
// answering a fixed reply: the cost of the transport and the library, for
// comparison.
func BenchmarkQueryUDPBaseline(b *testing.B) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &mdns.Server{PacketConn: pc, Handler: mdns.HandlerFunc(func(w mdns.ResponseWriter, r *mdns.Msg) {
		m := new(mdns.Msg)
		m.SetReply(r)
		m.Answer = append(m.Answer, &mdns.A{
			Hdr: mdns.RR_Header{Name: r.Question[0].Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: TTL},
			A:   net.IPv4(198, 19, 0, 1),
		})
		w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	b.Cleanup(func() { srv.Shutdown() })
	benchUDP(b, pc.LocalAddr().String())
}

func benchUDP(b *testing.B, addr string) {
	co, err := (&mdns.Client{Net: "udp"}).Dial(addr)
	if err != nil {
		b.Fatal(err)
	}
	defer co.Close()
	m := query("api.github.com.", mdns.TypeA)
	b.ReportAllocs()
	for b.Loop() {
		m.Id++
		if err := co.WriteMsg(m); err != nil {
			b.Fatal(err)
		}
		r, err := co.ReadMsg()
		if err != nil {
			b.Fatal(err)
		}
		if len(r.Answer) != 1 {
			b.Fatalf("answers %v", r.Answer)
		}
	}
}
