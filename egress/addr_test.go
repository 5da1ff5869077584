package egress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAddresses(t *testing.T) {
	for _, a := range []netip.Addr{Gateway, Guest} {
		if !GatewayPrefix.Contains(a) {
			t.Errorf("%s is not in GatewayPrefix %s", a, GatewayPrefix)
		}
		if IsResolverAddr(a) {
			t.Errorf("%s is a resolver address", a)
		}
	}
	if !GatewayPrefix6.Contains(Gateway6) {
		t.Errorf("%s is not in %s", Gateway6, GatewayPrefix6)
	}
	if GatewayPrefix.Overlaps(MappedPrefix) {
		t.Errorf("GatewayPrefix %s overlaps MappedPrefix %s", GatewayPrefix, MappedPrefix)
	}
	// The room's addresses are special: the proxy never dials them upstream.
	for _, a := range []netip.Addr{Gateway, Guest, MappedPrefix.Addr(), Gateway6} {
		if _, _, ok := SpecialRange(a); !ok {
			t.Errorf("%s is not in a special range", a)
		}
	}
	for _, tc := range []struct {
		a  string
		ok bool
	}{
		{"198.19.0.1", true},
		{"198.19.255.254", true},
		{"::ffff:198.19.0.1", true},
		{"198.18.0.1", false},
		{"198.20.0.1", false},
		{"fd61:7362::1", false},
	} {
		if got := IsResolverAddr(netip.MustParseAddr(tc.a)); got != tc.ok {
			t.Errorf("IsResolverAddr(%s) = %v, want %v", tc.a, got, tc.ok)
		}
	}
	if got := lastAddr(netip.MustParsePrefix("198.19.0.0/16")); got != netip.MustParseAddr("198.19.255.255") {
		t.Errorf("lastAddr(198.19.0.0/16) = %s", got)
	}
	if got := lastAddr(netip.MustParsePrefix("fd00::/120")); got != netip.MustParseAddr("fd00::ff") {
		t.Errorf("lastAddr(fd00::/120) = %s", got)
	}
}

func TestMapper(t *testing.T) {
	m := NewMapper()
	a, err := m.Map("Example.com.")
	if err != nil {
		t.Fatal(err)
	}
	if a != netip.MustParseAddr("198.19.0.1") {
		t.Errorf("first address %s, want 198.19.0.1 (the prefix's own address is not given)", a)
	}
	for _, spelling := range []string{"example.com", "EXAMPLE.COM", "example.com."} {
		if b, err := m.Map(spelling); err != nil || b != a {
			t.Errorf("Map(%q) = %s, %v; want %s", spelling, b, err, a)
		}
	}
	b, err := m.Map("other.test")
	if err != nil || b == a || !IsResolverAddr(b) {
		t.Errorf("second name got %s, %v; want a different resolver address than %s", b, err, a)
	}
	if n, ok := m.Name(a); !ok || n != "example.com" {
		t.Errorf("Name(%s) = %q, %v", a, n, ok)
	}
	if n, ok := m.Name(netip.MustParseAddr("::ffff:" + b.String())); !ok || n != "other.test" {
		t.Errorf("Name(v4-mapped %s) = %q, %v", b, n, ok)
	}
	if n, ok := m.Name(b.Next()); ok {
		t.Errorf("Name of an address not given = %q", n)
	}
}

func TestMapperExhausted(t *testing.T) {
	m := NewMapper()
	seen := map[netip.Addr]bool{}
	n := 1<<16 - 2 // 198.19.0.1 through 198.19.255.254
	for i := range n {
		a, err := m.Map(fmt.Sprintf("n%d.test", i))
		if err != nil {
			t.Fatalf("Map number %d: %v", i+1, err)
		}
		if seen[a] || !IsResolverAddr(a) || a == lastAddr(MappedPrefix) {
			t.Fatalf("Map number %d gave %s (seen %v)", i+1, a, seen[a])
		}
		seen[a] = true
	}
	_, err := m.Map("one-more.test")
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(n)) {
		t.Errorf("Map beyond the prefix: %v, want an error saying all %d are given", err, n)
	}
	// Names already mapped still answer.
	if a, err := m.Map("n0.test"); err != nil || a != netip.MustParseAddr("198.19.0.1") {
		t.Errorf("Map of a mapped name after exhaustion: %s, %v", a, err)
	}
}

func TestMapperConcurrent(t *testing.T) {
	m := NewMapper()
	var wg sync.WaitGroup
	got := make([]netip.Addr, 64)
	for i := range got {
		wg.Go(func() {
			a, err := m.Map(fmt.Sprintf("n%d.test", i%8))
			if err != nil {
				t.Error(err)
			}
			got[i] = a
		})
	}
	wg.Wait()
	byName := map[int]netip.Addr{}
	distinct := map[netip.Addr]bool{}
	for i, a := range got {
		if prev, ok := byName[i%8]; ok && prev != a {
			t.Errorf("n%d.test got %s and %s", i%8, prev, a)
		}
		byName[i%8] = a
		distinct[a] = true
	}
	if len(distinct) != 8 {
		t.Errorf("%d distinct addresses for 8 names", len(distinct))
	}
}

func TestReadLogSummarize(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	in := []any{
		Query{Type: "dns", Time: now, Step: "s", Name: "example.com", QType: "A", Rcode: "NOERROR", Answer: "198.19.0.1", Reason: `network.allow "example.com:443"`},
		Query{Type: "dns", Time: now, Step: "s", Name: "example.org", QType: "A", Rcode: "NXDOMAIN", Reason: "no network.allow entry names it"},
		Conn{Type: "conn", Time: now, Step: "s", Dst: "198.19.0.1:443", Name: "example.com", NameSource: FromDNS, SNI: "example.com",
			Decision: Decision{Allow: true, Rule: "example.com:443", Reason: `network.allow "example.com:443"`}, Upstream: "93.184.216.34:443", BytesOut: 100, BytesIn: 2000, DurationMS: 30},
		Conn{Type: "conn", Time: now, Step: "s", Dst: "198.19.0.2:443", Name: "down.test", NameSource: FromDNS,
			Decision: Decision{Allow: true, Rule: "down.test", Reason: "x"}, Error: "dial: connection refused", BytesOut: 5},
		Conn{Type: "conn", Time: now, Step: "s", Dst: "192.0.2.1:443", Name: "api.example.com", NameSource: FromSNI,
			Decision: Decision{Reason: "no", Hint: "192.0.2.1:443"}},
		Conn{Type: "conn", Time: now, Step: "s", Dst: "192.0.2.1:443",
			Decision: Decision{Reason: "no", Hint: "192.0.2.1:443"}},
		Conn{Type: "conn", Time: now, Step: "s", Dst: "198.19.0.3:443", Name: "secret.test", NameSource: FromDNS,
			Decision: Decision{Rule: "secret.test", Reason: "forbidden"}},
		Conn{Type: "conn", Time: now, Step: "s", Name: "new.test", NameSource: FromConnect,
			Decision: Decision{Reason: "no", Hint: "new.test:443"}},
		Drops{Type: "drops", Step: "s", Packets: 7, Bytes: 700, By: map[string]uint64{"output": 7}},
		Query{Type: "dns", Time: now, Step: "s", Suppressed: 40, Reason: "40 more"},
		Truncated{Type: "truncated", Step: "s", Lines: 3, Limit: 1 << 20},
	}
	var buf bytes.Buffer
	for _, v := range in {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b)
		buf.WriteString("\n\n") // blank lines are skipped
	}
	lines, err := ReadLog(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != len(in) {
		t.Fatalf("%d lines, want %d", len(lines), len(in))
	}
	for i, l := range lines {
		var got any
		switch {
		case l.Conn != nil:
			got = *l.Conn
		case l.Query != nil:
			got = *l.Query
		case l.Drops != nil:
			got = *l.Drops
		case l.Truncated != nil:
			got = *l.Truncated
		}
		if !reflect.DeepEqual(got, in[i]) {
			t.Errorf("line %d:\n got %+v\nwant %+v", i, got, in[i])
		}
	}
	want := Summary{
		Allowed: 1, Denied: 4, Failed: 1, Queries: 42, NXDomain: 1, Dropped: 7, NotLogged: 3,
		BytesOut: 105, BytesIn: 2000,
		Blocked: []Blocked{
			{Target: "192.0.2.1:443", Hint: "192.0.2.1:443", Count: 2}, // the SNI name does not count
			{Target: "new.test", Hint: "new.test:443", Count: 1},
			{Target: "secret.test", Rule: "secret.test", Count: 1},
		},
	}
	if got := Summarize(lines); !reflect.DeepEqual(got, want) {
		t.Errorf("Summarize:\n got %+v\nwant %+v", got, want)
	}
}

func TestReadLogErrors(t *testing.T) {
	for _, tc := range []struct{ log, err string }{
		{`{"type":"dns","name":"a"}` + "\n" + `{"type":"tcp"}`, `line 2: unknown type "tcp"`},
		{`{"type":"conn"`, "line 1"},
		{`{"type":"dns","time":"yesterday"}`, "line 1"},
		{`not json`, "line 1"},
		{`{"type":"dns","name":"` + strings.Repeat("a", 2<<20) + `"}`, "read network log"},
	} {
		if _, err := ReadLog(strings.NewReader(tc.log)); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ReadLog(%.40q): %v, want an error containing %q", tc.log, err, tc.err)
		}
	}
	if lines, err := ReadLog(strings.NewReader("")); err != nil || len(lines) != 0 {
		t.Errorf("empty log: %v, %v", lines, err)
	}
}

// FuzzClassifyPrefix: a prefix ClassifyPrefix calls internal holds only
// internal addresses (so admission refuses no entry that could reach
// anything else), and SpecialRange agrees with Classify on every address.
func FuzzClassifyPrefix(f *testing.F) {
	for _, s := range []string{"2002:7f00::/24", "::ffff:10.0.0.0/104", "64:ff9b::a9fe:a9fe/128", "2001:0:7f00::/40", "127.0.0.0/8", "fd00::/8", "2001:0:4136:e378:8000:63bf:80fe:fefe/128"} {
		p := netip.MustParsePrefix(s)
		b := p.Addr().As16()
		f.Add(b[:], uint8(p.Bits()+96*btoi(p.Addr().Is4())), []byte{0xff, 0, 0x5a, 1})
	}
	f.Fuzz(func(t *testing.T, addr []byte, bits uint8, sample []byte) {
		if len(addr) != 16 || int(bits) > 128 {
			return
		}
		p, err := netip.AddrFrom16([16]byte(addr)).Prefix(int(bits))
		if err != nil {
			return
		}
		// a: an address inside p, its host bits from sample.
		var s [16]byte
		for i := range s {
			if len(sample) > 0 {
				s[i] = sample[i%len(sample)]
			}
		}
		pb := p.Addr().As16()
		for i := 0; i < 128; i++ {
			if i < p.Bits() {
				mask := byte(1) << (7 - i%8)
				s[i/8] = s[i/8]&^mask | pb[i/8]&mask
			}
		}
		a := netip.AddrFrom16(s)
		if !p.Contains(a) {
			t.Fatalf("%s not in %s", a, p)
		}
		ins, err := Classify(a, nil)
		if err != nil {
			t.Fatal(err)
		}
		if in, ok := ClassifyPrefix(p); ok && len(ins) == 0 {
			t.Fatalf("ClassifyPrefix(%s) = %s, but %s in it is not internal", p, in, a)
		}
		if _, _, ok := SpecialRange(a); ok != (len(ins) > 0) {
			t.Fatalf("SpecialRange(%s) = %v, Classify %v", a, ok, ins)
		}
		if p4 := p; p.Addr().Is4In6() && p.Bits() >= 96 {
			// The same prefix written as IPv4 is judged the same.
			q := netip.PrefixFrom(p4.Addr().Unmap(), p.Bits()-96)
			_, ok1 := ClassifyPrefix(p)
			_, ok2 := ClassifyPrefix(q)
			if ok1 != ok2 {
				t.Fatalf("ClassifyPrefix(%s) = %v, of %s %v", p, ok1, q, ok2)
			}
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
