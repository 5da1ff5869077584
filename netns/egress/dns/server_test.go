package dns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/agentsandbox/agentsandbox/egress"
)

// logRecorder collects log lines; Server calls Log from one goroutine at a
// time, the mutex is for the test's reads.
type logRecorder struct {
	mu    sync.Mutex
	lines []egress.Query
}

func (r *logRecorder) log(q egress.Query) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, q)
}

func (r *logRecorder) all() []egress.Query {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]egress.Query(nil), r.lines...)
}

type testServer struct {
	srv     *Server
	udp     string
	tcp     string
	rec     *logRecorder
	served  chan error
	udpCl   *mdns.Client
	tcpCl   *mdns.Client
	mapper  *egress.Mapper
	t       testing.TB
	closing sync.Once
}

var (
	testAllow = []string{"example.com:443", "*.github.com", "api.allowed.test", "*.deny.test", "10.0.0.0/8"}
	testDeny  = []string{"secret.deny.test", "*.evil.github.com"}
)

func startServer(t testing.TB, maxLogged int) *testServer {
	t.Helper()
	rules, err := egress.NewRules(testAllow, testDeny)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pc.Close()
		t.Fatal(err)
	}
	ts := &testServer{
		rec:    &logRecorder{},
		udp:    pc.LocalAddr().String(),
		tcp:    l.Addr().String(),
		served: make(chan error, 1),
		udpCl:  &mdns.Client{Net: "udp", Timeout: 5 * time.Second},
		tcpCl:  &mdns.Client{Net: "tcp", Timeout: 5 * time.Second},
		mapper: egress.NewMapper(),
		t:      t,
	}
	ts.srv = &Server{Step: "build", Rules: rules, Mapper: ts.mapper, Log: ts.rec.log, MaxLogged: maxLogged}
	go func() { ts.served <- ts.srv.Serve(pc, l) }()
	t.Cleanup(ts.close)
	return ts
}

// close closes the server and checks that Serve returned nil.
func (ts *testServer) close() {
	ts.closing.Do(func() {
		if err := ts.srv.Close(); err != nil {
			ts.t.Errorf("Close: %v", err)
		}
		select {
		case err := <-ts.served:
			if err != nil {
				ts.t.Errorf("Serve returned %v after Close, want nil", err)
			}
		case <-time.After(5 * time.Second):
			ts.t.Errorf("Serve did not return within 5s of Close")
		}
	})
}

func (ts *testServer) exchange(t testing.TB, tcp bool, m *mdns.Msg) *mdns.Msg {
	t.Helper()
	cl, addr := ts.udpCl, ts.udp
	if tcp {
		cl, addr = ts.tcpCl, ts.tcp
	}
	r, _, err := cl.Exchange(m, addr)
	if err != nil {
		t.Fatalf("exchange %v over %s: %v", m.Question, cl.Net, err)
	}
	if r.Id != m.Id || !r.Response {
		t.Fatalf("reply id %d response %v, want id %d and a response", r.Id, r.Response, m.Id)
	}
	return r
}

func query(name string, qtype uint16) *mdns.Msg {
	m := new(mdns.Msg)
	m.SetQuestion(name, qtype)
	return m
}

func answerA(t testing.TB, r *mdns.Msg) netip.Addr {
	t.Helper()
	if len(r.Answer) != 1 {
		t.Fatalf("answers %v, want one A record", r.Answer)
	}
	a, ok := r.Answer[0].(*mdns.A)
	if !ok {
		t.Fatalf("answer %v is not an A record", r.Answer[0])
	}
	addr, ok := netip.AddrFromSlice(a.A)
	if !ok {
		t.Fatalf("A record %v has no address", a)
	}
	return addr.Unmap()
}

func TestResolve(t *testing.T) {
	ts := startServer(t, 0)
	for _, tcp := range []bool{false, true} {
		proto := map[bool]string{false: "udp", true: "tcp"}[tcp]
		for _, tc := range []struct {
			name   string
			qtype  uint16
			rcode  int
			answer bool
		}{
			{"example.com.", mdns.TypeA, mdns.RcodeSuccess, true}, // exact, with a port
			{"Example.COM.", mdns.TypeA, mdns.RcodeSuccess, true}, // case-insensitive
			{"api.allowed.test.", mdns.TypeA, mdns.RcodeSuccess, true},
			{"api.github.com.", mdns.TypeA, mdns.RcodeSuccess, true}, // below a wildcard
			{"a.b.github.com.", mdns.TypeA, mdns.RcodeSuccess, true}, // further below
			{"github.com.", mdns.TypeA, mdns.RcodeNameError, false},  // the wildcard's apex
			{"x.evil.github.com.", mdns.TypeA, mdns.RcodeNameError, false},
			{"evil.github.com.", mdns.TypeA, mdns.RcodeNameError, false}, // deny *.x forbids x too
			{"secret.deny.test.", mdns.TypeA, mdns.RcodeNameError, false},
			{"other.deny.test.", mdns.TypeA, mdns.RcodeSuccess, true},
			{"www.example.com.", mdns.TypeA, mdns.RcodeNameError, false},
			{"example.org.", mdns.TypeA, mdns.RcodeNameError, false},
			{"10.1.2.3.", mdns.TypeA, mdns.RcodeNameError, false}, // CIDR rules name no names
			{"example.com.", mdns.TypeAAAA, mdns.RcodeSuccess, false},
			{"example.com.", mdns.TypeMX, mdns.RcodeSuccess, false},
			{"example.com.", mdns.TypeTXT, mdns.RcodeSuccess, false},
			{"example.org.", mdns.TypeAAAA, mdns.RcodeNameError, false},
			{".", mdns.TypeNS, mdns.RcodeNameError, false},
			{"exa\\.mple.com.", mdns.TypeA, mdns.RcodeNameError, false},
			{"x\\000.github.com.", mdns.TypeA, mdns.RcodeNameError, false}, // not a host name
		} {
			t.Run(fmt.Sprintf("%s/%s/%s", proto, tc.name, mdns.Type(tc.qtype)), func(t *testing.T) {
				r := ts.exchange(t, tcp, query(tc.name, tc.qtype))
				if r.Rcode != tc.rcode {
					t.Fatalf("rcode %s, want %s", mdns.RcodeToString[r.Rcode], mdns.RcodeToString[tc.rcode])
				}
				if len(r.Question) != 1 || r.Question[0].Name != tc.name || r.Question[0].Qtype != tc.qtype {
					t.Errorf("question %v, want %s %s echoed as asked", r.Question, tc.name, mdns.Type(tc.qtype))
				}
				if !tc.answer {
					if len(r.Answer) != 0 {
						t.Errorf("answers %v, want none", r.Answer)
					}
					return
				}
				a := answerA(t, r)
				if !egress.MappedPrefix.Contains(a) {
					t.Errorf("address %s is not in %s", a, egress.MappedPrefix)
				}
				if got := r.Answer[0].Header().Name; got != tc.name {
					t.Errorf("answer owner %q, want the name as asked %q", got, tc.name)
				}
				if ttl := r.Answer[0].Header().Ttl; ttl != TTL {
					t.Errorf("TTL %d, want %d", ttl, TTL)
				}
				if n, ok := ts.mapper.Name(a); !ok || n != canonical(tc.name) {
					t.Errorf("mapper says %s is %q (%v), want %q", a, n, ok, canonical(tc.name))
				}
			})
		}
	}
}

func TestSameNameSameAddress(t *testing.T) {
	ts := startServer(t, 0)
	a1 := answerA(t, ts.exchange(t, false, query("api.github.com.", mdns.TypeA)))
	a2 := answerA(t, ts.exchange(t, true, query("API.GitHub.com.", mdns.TypeA)))
	a3 := answerA(t, ts.exchange(t, false, query("aPi.github.com.", mdns.TypeA)))
	b := answerA(t, ts.exchange(t, false, query("raw.github.com.", mdns.TypeA)))
	if a1 != a2 || a1 != a3 {
		t.Errorf("one name got %s, %s and %s, want one address", a1, a2, a3)
	}
	if a1 == b {
		t.Errorf("two names both got %s", a1)
	}
}

func TestPTR(t *testing.T) {
	ts := startServer(t, 0)
	a := answerA(t, ts.exchange(t, false, query("Example.com.", mdns.TypeA)))
	rev, err := mdns.ReverseAddr(a.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, tcp := range []bool{false, true} {
		r := ts.exchange(t, tcp, query(rev, mdns.TypePTR))
		if r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("PTR %s: rcode %s answers %v, want one PTR", rev, mdns.RcodeToString[r.Rcode], r.Answer)
		}
		ptr, ok := r.Answer[0].(*mdns.PTR)
		if !ok || ptr.Ptr != "example.com." {
			t.Errorf("PTR %s: %v, want example.com.", rev, r.Answer[0])
		}
	}
	// The name exists, but it has no A record of its own.
	if r := ts.exchange(t, false, query(rev, mdns.TypeA)); r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 0 {
		t.Errorf("A %s: rcode %s answers %v, want NOERROR and none", rev, mdns.RcodeToString[r.Rcode], r.Answer)
	}
	unused := a.Next()
	for _, name := range []string{
		mustReverse(t, unused.String()), // in the prefix, not given out
		mustReverse(t, "8.8.8.8"),       // outside it
		mustReverse(t, egress.Gateway.String()),
		mustReverse(t, "fd61:7362::1"),
		"1.2.3.in-addr.arpa.",
		"01.0.19.198.in-addr.arpa.",
		"in-addr.arpa.",
	} {
		r := ts.exchange(t, false, query(name, mdns.TypePTR))
		if r.Rcode != mdns.RcodeNameError || len(r.Answer) != 0 {
			t.Errorf("PTR %s: rcode %s answers %v, want NXDOMAIN", name, mdns.RcodeToString[r.Rcode], r.Answer)
		}
	}
}

func mustReverse(t *testing.T, a string) string {
	t.Helper()
	r, err := mdns.ReverseAddr(a)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rawExchange sends b over UDP and returns the reply, or nil if none came
// within a short time.
func rawExchange(t *testing.T, addr string, b []byte) []byte {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}

func pack(t *testing.T, m *mdns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBadMessages(t *testing.T) {
	ts := startServer(t, 0)

	two := query("example.com.", mdns.TypeA)
	two.Question = append(two.Question, mdns.Question{Name: "api.github.com.", Qtype: mdns.TypeA, Qclass: mdns.ClassINET})
	none := query("example.com.", mdns.TypeA)
	none.Question = nil
	chaos := query("version.bind.", mdns.TypeTXT)
	chaos.Question[0].Qclass = mdns.ClassCHAOS
	anyClass := query("example.com.", mdns.TypeA)
	anyClass.Question[0].Qclass = mdns.ClassANY
	notify := query("example.com.", mdns.TypeSOA)
	notify.Opcode = mdns.OpcodeNotify
	update := query("example.com.", mdns.TypeSOA)
	update.Opcode = mdns.OpcodeUpdate
	status := query("example.com.", mdns.TypeA)
	status.Opcode = mdns.OpcodeStatus
	edns1 := query("example.com.", mdns.TypeA)
	edns1.SetEdns0(4096, false)
	edns1.IsEdns0().SetVersion(1)

	for _, tc := range []struct {
		name  string
		m     *mdns.Msg
		rcode int
	}{
		{"two questions", two, mdns.RcodeFormatError},
		{"no question", none, mdns.RcodeFormatError},
		{"class CH", chaos, mdns.RcodeFormatError},
		{"class ANY", anyClass, mdns.RcodeFormatError},
		{"NOTIFY", notify, mdns.RcodeNotImplemented},
		{"UPDATE", update, mdns.RcodeNotImplemented},
		{"STATUS", status, mdns.RcodeNotImplemented},
		{"EDNS version 1", edns1, mdns.RcodeBadVers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, tcp := range []bool{false, true} {
				r := ts.exchange(t, tcp, tc.m)
				if r.Rcode != tc.rcode {
					t.Errorf("tcp %v: rcode %s, want %s", tcp, mdns.RcodeToString[r.Rcode], mdns.RcodeToString[tc.rcode])
				}
				if len(r.Answer) != 0 {
					t.Errorf("tcp %v: answers %v, want none", tcp, r.Answer)
				}
			}
		})
	}

	// Bytes that do not unpack: FORMERR with the request's ID.
	good := pack(t, query("example.com.", mdns.TypeA))
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"header only, count says one question", append(append([]byte(nil), good[:12]...), 0)},
		{"truncated question", good[:len(good)-3]},
		{"label pointer loop", append(append([]byte(nil), good[:12]...), 0xc0, 12, 0, 1, 0, 1)},
		{"label longer than the message", append(append([]byte(nil), good[:12]...), 60, 'a')},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reply := rawExchange(t, ts.udp, tc.b)
			if len(reply) < 12 {
				t.Fatalf("reply %x, want a FORMERR header", reply)
			}
			r := new(mdns.Msg)
			if err := r.Unpack(reply); err != nil {
				t.Fatalf("reply %x does not unpack: %v", reply, err)
			}
			if r.Id != binary.BigEndian.Uint16(tc.b) || !r.Response || r.Rcode != mdns.RcodeFormatError {
				t.Errorf("reply %v, want FORMERR to id %d", r, binary.BigEndian.Uint16(tc.b))
			}
		})
	}

	// Not even a query: no reply.
	resp := query("example.com.", mdns.TypeA)
	resp.Response = true
	for name, b := range map[string][]byte{
		"empty":      {},
		"11 bytes":   good[:11],
		"a response": pack(t, resp),
	} {
		if reply := rawExchange(t, ts.udp, b); reply != nil {
			t.Errorf("%s: reply %x, want none", name, reply)
		}
	}

	// The server still answers.
	answerA(t, ts.exchange(t, false, query("example.com.", mdns.TypeA)))
}

func TestEDNS(t *testing.T) {
	ts := startServer(t, 0)
	m := query("example.com.", mdns.TypeA)
	m.SetEdns0(4096, true)
	r := ts.exchange(t, false, m)
	opt := r.IsEdns0()
	if opt == nil || opt.Version() != 0 || opt.UDPSize() != ednsSize {
		t.Errorf("reply OPT %v, want EDNS 0 with size %d", opt, ednsSize)
	}
	answerA(t, r)
	if r := ts.exchange(t, false, query("example.com.", mdns.TypeA)); r.IsEdns0() != nil {
		t.Errorf("reply to a query without EDNS has OPT %v", r.IsEdns0())
	}
}

func TestTCPBounds(t *testing.T) {
	ts := startServer(t, 0)

	// Several queries on one connection.
	c, err := net.Dial("tcp", ts.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	co := &mdns.Conn{Conn: c}
	for i := range 3 {
		if err := co.WriteMsg(query(fmt.Sprintf("h%d.github.com.", i), mdns.TypeA)); err != nil {
			t.Fatal(err)
		}
		r, err := co.ReadMsg()
		if err != nil {
			t.Fatal(err)
		}
		answerA(t, r)
	}

	// A message longer than MaxTCPMessage ends the connection.
	c2, err := net.Dial("tcp", ts.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.Write([]byte{0xff, 0xff})
	c2.SetReadDeadline(time.Now().Add(3 * time.Second))
	if n, err := c2.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Errorf("after an oversized length: read %d bytes, %v; want the connection closed", n, err)
	}

	// More than MaxTCPConns connections at once: the extra ones are
	// closed, and once the others go, connections are served again.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range MaxTCPConns {
		c, err := net.Dial("tcp", ts.tcp)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// The server has accepted them all once one more is refused.
	deadline := time.Now().Add(5 * time.Second)
	for {
		extra, err := net.Dial("tcp", ts.tcp)
		if err != nil {
			t.Fatal(err)
		}
		extra.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		_, err = extra.Read(make([]byte, 1))
		extra.Close()
		if errors.Is(err, io.EOF) || isReset(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("connection %d was not closed (%v); want at most %d served at once", MaxTCPConns+1, err, MaxTCPConns)
		}
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	deadline = time.Now().Add(5 * time.Second)
	for {
		r, _, err := ts.tcpCl.Exchange(query("example.com.", mdns.TypeA), ts.tcp)
		if err == nil {
			answerA(t, r)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no TCP answer after the held connections closed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

func TestTCPIdleTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for TCPIdleTimeout")
	}
	ts := startServer(t, 0)
	c, err := net.Dial("tcp", ts.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{0}) // half a length: the server waits for the rest
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(TCPIdleTimeout + 5*time.Second))
	_, err = c.Read(make([]byte, 1))
	if !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("read: %v, want the server to close an idle connection", err)
	}
	if d := time.Since(start); d < TCPIdleTimeout-time.Second {
		t.Errorf("closed after %v, want about %v", d, TCPIdleTimeout)
	}
}

func TestLog(t *testing.T) {
	ts := startServer(t, 0)
	ts.exchange(t, false, query("Example.COM.", mdns.TypeA))
	ts.exchange(t, true, query("example.com.", mdns.TypeAAAA))
	ts.exchange(t, false, query("example.org.", mdns.TypeA))
	ts.exchange(t, false, query("github.com.", mdns.TypeA))
	ts.exchange(t, false, query("secret.deny.test.", mdns.TypeA))
	chaos := query("version.bind.", mdns.TypeTXT)
	chaos.Question[0].Qclass = mdns.ClassCHAOS
	ts.exchange(t, false, chaos)
	ts.close()

	lines := ts.rec.all()
	addr, _ := ts.mapper.Map("example.com")
	want := []egress.Query{
		{Name: "example.com", QType: "A", Rcode: "NOERROR", Answer: addr.String(), Reason: `network.allow "example.com:443"`},
		{Name: "example.com", QType: "AAAA", Rcode: "NOERROR", Reason: `network.allow "example.com:443"; the name exists, but the step's resolver gives A records only`},
		{Name: "example.org", QType: "A", Rcode: "NXDOMAIN", Reason: `no network.allow entry names it; to allow it, add "example.org:PORT" to the step's network.allow (PORT: the port the step connects to)`},
		{Name: "github.com", QType: "A", Rcode: "NXDOMAIN", Reason: `network.allow "*.github.com" names the names below github.com, not github.com itself; to allow it, add "github.com:PORT" to the step's network.allow (PORT: the port the step connects to)`},
		{Name: "secret.deny.test", QType: "A", Rcode: "NXDOMAIN", Reason: `forbidden by the policy (data.agentsandbox.egress_deny "secret.deny.test"); no network.allow entry can open it`},
		{Name: "version.bind", QType: "TXT", Rcode: "FORMERR", Reason: `class CH; the step's resolver answers class IN only`},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d log lines, want %d:\n%v", len(lines), len(want), lines)
	}
	for i, got := range lines {
		if got.Type != "dns" || got.Step != "build" || time.Since(got.Time) > time.Minute || got.Time.Location() != time.UTC {
			t.Errorf("line %d: type %q step %q time %v, want dns, build, now in UTC", i, got.Type, got.Step, got.Time)
		}
		got.Type, got.Step, got.Time = "", "", time.Time{}
		if got != want[i] {
			t.Errorf("line %d:\n got %+v\nwant %+v", i, got, want[i])
		}
	}
}

func TestMaxLogged(t *testing.T) {
	ts := startServer(t, 3)
	for i := range 10 {
		ts.exchange(t, i%2 == 0, query(fmt.Sprintf("n%d.github.com.", i), mdns.TypeA))
	}
	if n := len(ts.rec.all()); n != 3 {
		t.Errorf("%d lines before Close, want 3", n)
	}
	ts.close()
	if err := ts.srv.Close(); err != nil { // idempotent: no second final line
		t.Errorf("second Close: %v", err)
	}
	lines := ts.rec.all()
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 3 and one final line:\n%v", len(lines), lines)
	}
	last := lines[3]
	if last.Suppressed != 7 || last.Name != "" || !strings.Contains(last.Reason, "7 more queries") || last.Step != "build" {
		t.Errorf("final line %+v, want 7 suppressed", last)
	}
	if s := egress.Summarize(linesOf(lines)); s.Queries != 10 {
		t.Errorf("summary counts %d queries, want 10", s.Queries)
	}
}

func linesOf(qs []egress.Query) []egress.Line {
	var out []egress.Line
	for i := range qs {
		out = append(out, egress.Line{Query: &qs[i]})
	}
	return out
}

func TestCloseAndServe(t *testing.T) {
	// Close is idempotent and Serve returns (checked by close).
	ts := startServer(t, 0)
	answerA(t, ts.exchange(t, false, query("example.com.", mdns.TypeA)))
	ts.close()
	if err := ts.srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, _, err := (&mdns.Client{Net: "tcp", Timeout: time.Second}).Exchange(query("example.com.", mdns.TypeA), ts.tcp); err == nil {
		t.Errorf("TCP answered after Close")
	}

	rules, _ := egress.NewRules(nil, nil)

	// Close before Serve: Serve closes the sockets and returns.
	s := &Server{Step: "s", Rules: rules, Mapper: egress.NewMapper()}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(pc, nil); err != nil {
		t.Errorf("Serve after Close: %v, want nil", err)
	}
	if _, _, err := pc.ReadFrom(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("socket after Serve on a closed server: %v, want closed", err)
	}

	// Only UDP, then only TCP.
	for _, udp := range []bool{true, false} {
		s := &Server{Step: "s", Rules: rules, Mapper: egress.NewMapper()}
		served := make(chan error, 1)
		if udp {
			pc, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { served <- s.Serve(pc, nil) }()
			r, _, err := (&mdns.Client{Net: "udp", Timeout: 5 * time.Second}).Exchange(query("x.", mdns.TypeA), pc.LocalAddr().String())
			if err != nil || r.Rcode != mdns.RcodeNameError {
				t.Errorf("UDP only: %v %v", r, err)
			}
		} else {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { served <- s.Serve(nil, l) }()
			// An idle connection open at Close does not hold Close up.
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r, _, err := (&mdns.Client{Net: "tcp", Timeout: 5 * time.Second}).Exchange(query("x.", mdns.TypeA), l.Addr().String())
			if err != nil || r.Rcode != mdns.RcodeNameError {
				t.Errorf("TCP only: %v %v", r, err)
			}
		}
		start := time.Now()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Close took %v", d)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}

	// Misuse is an error a person can act on.
	if err := (&Server{Rules: rules, Mapper: egress.NewMapper()}).Serve(nil, nil); err == nil || !strings.Contains(err.Error(), "no socket") {
		t.Errorf("Serve(nil, nil): %v", err)
	}
	pc2, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := (&Server{}).Serve(pc2, nil); err == nil || !strings.Contains(err.Error(), "egress.NewRules") {
		t.Errorf("Serve without rules: %v", err)
	}
}

// A socket failing under the server ends Serve with an error that names it.
func TestServeSocketError(t *testing.T) {
	rules, _ := egress.NewRules(nil, nil)
	s := &Server{Step: "s", Rules: rules, Mapper: egress.NewMapper()}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(pc, l) }()
	time.Sleep(50 * time.Millisecond)
	pc.Close() // not through Close
	select {
	case err := <-served:
		if err == nil || !strings.Contains(err.Error(), "read UDP") {
			t.Errorf("Serve: %v, want the UDP read error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its socket failed")
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close after a failed Serve: %v", err)
	}
}

func TestConcurrentQueries(t *testing.T) {
	ts := startServer(t, 0)
	var wg sync.WaitGroup
	addrs := make([]netip.Addr, 40)
	for i := range addrs {
		wg.Go(func() {
			r, _, err := (&mdns.Client{Net: []string{"udp", "tcp"}[i%2], Timeout: 5 * time.Second}).Exchange(
				query(fmt.Sprintf("n%d.github.com.", i/2), mdns.TypeA), map[bool]string{true: ts.udp, false: ts.tcp}[i%2 == 0])
			if err != nil {
				t.Error(err)
				return
			}
			if len(r.Answer) == 1 {
				addrs[i] = answerAddr(r.Answer[0])
			}
		})
	}
	wg.Wait()
	seen := map[netip.Addr]int{}
	for i := 0; i < len(addrs); i += 2 {
		if addrs[i] != addrs[i+1] || !addrs[i].IsValid() {
			t.Errorf("n%d.github.com got %s over UDP and %s over TCP", i/2, addrs[i], addrs[i+1])
		}
		seen[addrs[i]]++
	}
	if len(seen) != len(addrs)/2 {
		t.Errorf("%d distinct addresses for %d names", len(seen), len(addrs)/2)
	}
}

func answerAddr(rr mdns.RR) netip.Addr {
	a, ok := rr.(*mdns.A)
	if !ok {
		return netip.Addr{}
	}
	addr, _ := netip.AddrFromSlice(a.A)
	return addr.Unmap()
}
