package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		entry string
		want  Rule // Entry is filled from entry
	}{
		{"example.com", Rule{Host: "example.com"}},
		{"example.com:443", Rule{Host: "example.com", Port: 443}},
		{"Example.COM.", Rule{Host: "example.com"}},
		{"*.example.com", Rule{Host: "example.com", Wildcard: true}},
		{"*.Example.com:8443", Rule{Host: "example.com", Wildcard: true, Port: 8443}},
		{"1.2.3.4", Rule{Prefix: netip.MustParsePrefix("1.2.3.4/32")}},
		{"1.2.3.4:80", Rule{Prefix: netip.MustParsePrefix("1.2.3.4/32"), Port: 80}},
		{"10.0.0.0/8", Rule{Prefix: netip.MustParsePrefix("10.0.0.0/8")}},
		{"10.1.2.3/8", Rule{Prefix: netip.MustParsePrefix("10.0.0.0/8")}}, // masked
		{"10.0.0.0/8:5432", Rule{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Port: 5432}},
		{"::1", Rule{Prefix: netip.MustParsePrefix("::1/128")}},
		{"2001:db8::/32", Rule{Prefix: netip.MustParsePrefix("2001:db8::/32")}},
		{"[2001:db8::1]:443", Rule{Prefix: netip.MustParsePrefix("2001:db8::1/128"), Port: 443}},
		{"[2001:db8::/32]:443", Rule{Prefix: netip.MustParsePrefix("2001:db8::/32"), Port: 443}},
		{"[::1]", Rule{Prefix: netip.MustParsePrefix("::1/128")}},
		{"::ffff:1.2.3.4", Rule{Prefix: netip.MustParsePrefix("1.2.3.4/32")}}, // unmapped
		{"example.com:65535", Rule{Host: "example.com", Port: 65535}},
	} {
		got, err := ParseRule(tc.entry)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", tc.entry, err)
			continue
		}
		tc.want.Entry = tc.entry
		if got != tc.want {
			t.Errorf("ParseRule(%q) = %+v, want %+v", tc.entry, got, tc.want)
		}
		if got.IsCIDR() != tc.want.Prefix.IsValid() {
			t.Errorf("ParseRule(%q).IsCIDR() = %v", tc.entry, got.IsCIDR())
		}
	}

	for _, tc := range []struct{ entry, err string }{
		{"*", "list the hosts or prefixes"},
		{"", "is not a host name"},
		{".", "is not a host name"},
		{"*.", "is not a host name"},
		{"example.com:0", "is not 1-65535"},
		{"example.com:65536", "is not 1-65535"},
		{"example.com:http", "is not 1-65535"},
		{"example.com:", "is not 1-65535"}, // not "any port"
		{"[::1]:", "is not 1-65535"},
		{"[::1", "without ']'"},
		{"[::1]443", "is not :PORT"},
		{"foo*.com", "is not a host name"},
		{"*.*.com", "is not a host name"},
		{"a b.com", "is not a host name"},
		{"example.com:443:80", "is not a host name"},
		{"10.0.0.0/33", "is not a host name"},
	} {
		if r, err := ParseRule(tc.entry); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseRule(%q) = %+v, %v; want an error containing %q", tc.entry, r, err, tc.err)
		}
	}
}

func TestNewRules(t *testing.T) {
	rs, err := NewRules([]string{"example.com", "10.0.0.0/8"}, []string{"169.254.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.Allow) != 2 || len(rs.Deny) != 1 || rs.Deny[0].Entry != "169.254.0.0/16" {
		t.Errorf("NewRules = %+v", rs)
	}
	if _, err := NewRules([]string{"example.com:0"}, nil); err == nil || !strings.Contains(err.Error(), `"example.com:0"`) {
		t.Errorf("bad allow entry: %v", err)
	}
	if _, err := NewRules(nil, []string{"*"}); err == nil || !strings.Contains(err.Error(), "agentsandbox.egress_deny") {
		t.Errorf("bad deny entry: %v, want it to name the policy data", err)
	}
}

func mustRules(t *testing.T, allow, deny []string) *Rules {
	t.Helper()
	rs, err := NewRules(allow, deny)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestDecide(t *testing.T) {
	rs := mustRules(t,
		[]string{
			"api.example.com:443",
			"*.example.com",
			"pkg.example.org",
			"*.example.org:443",
			"203.0.113.0/24",
			"198.51.100.7:22",
			"[2001:db8::/32]:443",
			"blocked.example.com",
		},
		[]string{
			"blocked.example.com",
			"*.evil.example.com",
			"203.0.113.66",
			"internal.example.org:443",
		})
	mapped := netip.MustParseAddr("198.19.0.5") // a resolver address
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name  string
		q     Request
		allow bool
		rule  string
		hint  string
		in    string // in the reason
	}{
		// 1. deny first, whatever allows.
		{"deny exact beats allow exact", Request{Name: "blocked.example.com", NameSource: FromDNS, Addr: mapped, Port: 443}, false, "blocked.example.com", "", "forbidden by the policy"},
		{"deny wildcard", Request{Name: "x.evil.example.com", NameSource: FromDNS, Addr: mapped, Port: 443}, false, "*.evil.example.com", "", "no network.allow entry can open it"},
		{"deny wildcard covers its apex", Request{Name: "evil.example.com", NameSource: FromDNS, Addr: mapped, Port: 443}, false, "*.evil.example.com", "", "forbidden"},
		{"deny address", Request{Addr: a("203.0.113.66"), Port: 443}, false, "203.0.113.66", "", "forbidden"},
		{"deny port matches", Request{Name: "internal.example.org", NameSource: FromDNS, Addr: mapped, Port: 443}, false, "internal.example.org:443", "", "forbidden"},
		{"deny port does not match", Request{Name: "internal.example.org", NameSource: FromDNS, Addr: mapped, Port: 80}, false, "", "internal.example.org:80", "no network.allow entry matches"},
		{"deny by name even from SNI", Request{Name: "blocked.example.com", NameSource: FromSNI, Addr: a("203.0.113.5"), Port: 443}, false, "blocked.example.com", "", "forbidden"},

		// 2. exact before wildcard.
		{"exact", Request{Name: "api.example.com", NameSource: FromDNS, Addr: mapped, Port: 443}, true, "api.example.com:443", "", `network.allow "api.example.com:443"`},
		{"exact case and dot", Request{Name: "API.example.com.", NameSource: FromDNS, Addr: mapped, Port: 443}, true, "api.example.com:443", "", ""},
		{"exact wrong port falls to wildcard", Request{Name: "api.example.com", NameSource: FromDNS, Addr: mapped, Port: 80}, true, "*.example.com", "", ""},
		{"exact any port", Request{Name: "pkg.example.org", NameSource: FromDNS, Addr: mapped, Port: 8080}, true, "pkg.example.org", "", ""},

		// 3. wildcards: below the domain, not the domain.
		{"wildcard", Request{Name: "www.example.com", NameSource: FromDNS, Addr: mapped, Port: 80}, true, "*.example.com", "", ""},
		{"wildcard deep", Request{Name: "a.b.example.com", NameSource: FromDNS, Addr: mapped, Port: 80}, true, "*.example.com", "", ""},
		{"wildcard apex", Request{Name: "example.com", NameSource: FromDNS, Addr: mapped, Port: 443}, false, "", "example.com:443", "no network.allow entry matches example.com port 443"},
		{"wildcard suffix is not a label", Request{Name: "notexample.com", NameSource: FromDNS, Addr: mapped, Port: 443}, false, "", "notexample.com:443", ""},
		{"wildcard port", Request{Name: "www.example.org", NameSource: FromDNS, Addr: mapped, Port: 443}, true, "*.example.org:443", "", ""},
		{"wildcard wrong port", Request{Name: "www.example.org", NameSource: FromDNS, Addr: mapped, Port: 80}, false, "", "www.example.org:80", ""},
		{"name from the proxy endpoint", Request{Name: "www.example.com", NameSource: FromConnect, Port: 443}, true, "*.example.com", "", ""},

		// 4. CIDR.
		{"cidr", Request{Addr: a("203.0.113.9"), Port: 443}, true, "203.0.113.0/24", "", ""},
		{"cidr single address with port", Request{Addr: a("198.51.100.7"), Port: 22}, true, "198.51.100.7:22", "", ""},
		{"cidr single address wrong port", Request{Addr: a("198.51.100.7"), Port: 23}, false, "", "198.51.100.7:23", ""},
		{"cidr v4-mapped", Request{Addr: a("::ffff:203.0.113.9"), Port: 443}, true, "203.0.113.0/24", "", ""},
		{"cidr v6", Request{Addr: a("2001:db8::5"), Port: 443}, true, "[2001:db8::/32]:443", "", ""},
		{"cidr v6 wrong port", Request{Addr: a("2001:db8::5"), Port: 80}, false, "", "[2001:db8::5]:80", ""},
		{"no cidr for a resolver name", Request{Name: "other.test", NameSource: FromDNS, Addr: mapped, Port: 443}, false, "", "other.test:443", ""},

		// Names claimed on an address the job dialled count for nothing.
		{"SNI on a direct address, allowed name", Request{Name: "api.example.com", NameSource: FromSNI, Addr: a("192.0.2.1"), Port: 443}, false, "", "192.0.2.1:443", "judged by its address alone"},
		{"Host on a direct address, wildcard name", Request{Name: "www.example.com", NameSource: FromHost, Addr: a("192.0.2.1"), Port: 80}, false, "", "192.0.2.1:80", "judged by its address alone"},
		{"SNI on a direct address in a cidr", Request{Name: "anything.test", NameSource: FromSNI, Addr: a("203.0.113.9"), Port: 443}, true, "203.0.113.0/24", "", ""},
		{"SNI on a v6 address", Request{Name: "api.example.com", NameSource: FromSNI, Addr: a("2001:db9::1"), Port: 443}, false, "", "[2001:db9::1]:443", "judged by its address alone"},

		// 5. default deny hints.
		{"hint name", Request{Name: "new.test", NameSource: FromDNS, Addr: mapped, Port: 443}, false, "", "new.test:443", `add "new.test:443" to the step's network.allow`},
		{"hint address", Request{Addr: a("192.0.2.1"), Port: 8080}, false, "", "192.0.2.1:8080", `add "192.0.2.1:8080"`},
		{"hint no port", Request{Addr: a("192.0.2.1")}, false, "", "192.0.2.1", ""},
		{"hint v6 no port", Request{Addr: a("2001:db9::1")}, false, "", "2001:db9::1", ""},
		{"hint connect", Request{Name: "new.test", NameSource: FromConnect, Port: 443}, false, "", "new.test:443", ""},
		{"nothing known", Request{}, false, "", "", "(unknown destination)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := rs.Decide(tc.q)
			if d.Allow != tc.allow || d.Rule != tc.rule || d.Hint != tc.hint {
				t.Errorf("Decide(%+v) = %+v; want allow %v rule %q hint %q", tc.q, d, tc.allow, tc.rule, tc.hint)
			}
			if !strings.Contains(d.Reason, tc.in) || d.Reason == "" {
				t.Errorf("reason %q, want it to contain %q", d.Reason, tc.in)
			}
			if want := map[bool]string{true: "allow", false: "deny"}[tc.allow]; d.Verdict() != want {
				t.Errorf("verdict %q, want %q", d.Verdict(), want)
			}
		})
	}

	// A hint, added to network.allow, allows what it names.
	for _, q := range []Request{
		{Name: "new.test", NameSource: FromDNS, Addr: mapped, Port: 443},
		{Addr: a("192.0.2.1"), Port: 8080},
		{Addr: a("2001:db9::1"), Port: 443},
		{Name: "api.example.com", NameSource: FromSNI, Addr: a("192.0.2.1"), Port: 443},
		{Name: "example.com", NameSource: FromDNS, Addr: mapped, Port: 443},
	} {
		d := rs.Decide(q)
		if d.Allow || d.Hint == "" {
			t.Fatalf("Decide(%+v) = %+v, want a deny with a hint", q, d)
		}
		more := mustRules(t, []string{d.Hint}, nil)
		if d2 := more.Decide(q); !d2.Allow || d2.Rule != d.Hint {
			t.Errorf("with hint %q added, Decide(%+v) = %+v; want allowed by it", d.Hint, q, d2)
		}
	}
}

// A connection to one of the resolver's addresses is judged by its name,
// never by a CIDR rule that happens to hold the address.
func TestDecideResolverAddrNotByCIDR(t *testing.T) {
	rs := mustRules(t, []string{"198.19.0.0/16", "0.0.0.0/0"}, nil)
	q := Request{Name: "x.test", NameSource: FromDNS, Addr: netip.MustParseAddr("198.19.0.9"), Port: 443}
	if d := rs.Decide(q); d.Allow || d.Hint != "x.test:443" {
		t.Errorf("Decide(%+v) = %+v, want denied with hint x.test:443", q, d)
	}
}

func TestResolves(t *testing.T) {
	rs := mustRules(t,
		[]string{"api.example.com:443", "*.example.com", "*.example.org", "10.0.0.0/8", "exact.test"},
		[]string{"secret.example.com", "*.internal.example.com", "10.9.0.0/16"})
	for _, tc := range []struct {
		name string
		ok   bool
		rule string
	}{
		{"api.example.com", true, "api.example.com:443"}, // exact before wildcard
		{"API.Example.com.", true, "api.example.com:443"},
		{"www.example.com", true, "*.example.com"},
		{"a.b.example.org", true, "*.example.org"},
		{"exact.test", true, "exact.test"},
		{"example.com", false, ""}, // a wildcard's apex is not resolved
		{"example.org", false, ""},
		{"sub.exact.test", false, ""},
		{"secret.example.com", false, "secret.example.com"},
		{"internal.example.com", false, "*.internal.example.com"},
		{"db.internal.example.com", false, "*.internal.example.com"},
		{"10.1.2.3", false, ""}, // CIDR rules name no names
		{"", false, ""},
		{".", false, ""},
		{"other.test", false, ""},
	} {
		if got := rs.Resolves(tc.name); got != tc.ok {
			t.Errorf("Resolves(%q) = %v, want %v", tc.name, got, tc.ok)
		}
		r, ok := rs.ResolveRule(tc.name)
		if ok != tc.ok || r.Entry != tc.rule {
			t.Errorf("ResolveRule(%q) = %q, %v; want %q, %v", tc.name, r.Entry, ok, tc.rule, tc.ok)
		}
	}
}

func TestCheckUpstream(t *testing.T) {
	for _, tc := range []struct {
		name  string
		allow []string
		deny  []string
		addr  string
		err   string // "" for allowed
	}{
		{"public", nil, nil, "93.184.216.34", ""},
		{"public v6", nil, nil, "2606:2800:220:1::1", ""},
		{"metadata", nil, nil, "169.254.169.254", "link-local"},
		{"metadata v4-mapped", nil, nil, "::ffff:169.254.169.254", "link-local"},
		{"metadata with everything allowed", []string{"0.0.0.0/0"}, nil, "169.254.169.254", "refused unless a network.allow CIDR inside 169.254.0.0/16"},
		{"metadata named exactly", []string{"169.254.169.254:80"}, nil, "169.254.169.254", ""},
		{"private", nil, nil, "10.1.2.3", "a private address (10.0.0.0/8)"},
		{"private in 10/8", []string{"10.0.0.0/8"}, nil, "10.1.2.3", ""},
		{"private in 10.1/16", []string{"10.1.0.0/16"}, nil, "10.1.2.3", ""},
		{"private outside the rule", []string{"10.2.0.0/16"}, nil, "10.1.2.3", "private"},
		{"0/0 does not open private", []string{"0.0.0.0/0"}, nil, "10.1.2.3", "private"},
		{"8/6 holds 10/8 but is wider", []string{"8.0.0.0/6"}, nil, "10.1.2.3", "private"},
		{"0/0 opens public", []string{"0.0.0.0/0"}, nil, "93.184.216.34", ""},
		{"loopback", []string{"0.0.0.0/0"}, nil, "127.0.0.1", "loopback"},
		{"loopback v6", []string{"::/0"}, nil, "::1", "loopback"},
		{"the resolver's own range", nil, nil, "198.19.0.1", "benchmarking"},
		{"shared", nil, nil, "100.64.0.1", "shared"},
		{"unique local v6", nil, nil, "fd00:ec2::254", "unique local"},
		{"link-local v6", nil, nil, "fe80::1", "link-local"},
		{"multicast", nil, nil, "224.0.0.1", "multicast"},
		{"this network", nil, nil, "0.0.0.0", "unspecified"},
		{"deny wins over special allow", []string{"10.0.0.0/8"}, []string{"10.1.0.0/16"}, "10.1.2.3", "forbidden by the policy"},
		{"deny public", nil, []string{"93.184.216.0/24"}, "93.184.216.34", "forbidden by the policy"},
		{"NAT64 of metadata", nil, nil, "64:ff9b::a9fe:a9fe", "NAT64 for 169.254.169.254"},
		{"NAT64 of private", []string{"::/0"}, nil, "64:ff9b::a01:203", "NAT64 for 10.1.2.3"},
		{"NAT64 of allowed private", []string{"10.0.0.0/8"}, nil, "64:ff9b::a01:203", ""},
		{"NAT64 of denied", nil, []string{"93.184.216.0/24"}, "64:ff9b::5db8:d822", "forbidden by the policy"},
		{"NAT64 of public", nil, nil, "64:ff9b::5db8:d822", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := mustRules(t, tc.allow, tc.deny)
			err := rs.CheckUpstream(netip.MustParseAddr(tc.addr))
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("CheckUpstream(%s): %v, want allowed", tc.addr, err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("CheckUpstream(%s): %v, want an error containing %q", tc.addr, err, tc.err)
			}
		})
	}
}

func TestSpecialRange(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		prefix string // "" for none
	}{
		{"169.254.169.254", "169.254.0.0/16"},
		{"172.31.255.255", "172.16.0.0/12"},
		{"172.32.0.0", ""},
		{"192.168.1.1", "192.168.0.0/16"},
		{"255.255.255.255", "240.0.0.0/4"},
		{"::ffff:127.0.0.1", "127.0.0.0/8"},
		{"8.8.8.8", ""},
		{"2001:4860:4860::8888", ""},
	} {
		p, what, ok := SpecialRange(netip.MustParseAddr(tc.addr))
		if ok != (tc.prefix != "") || (ok && (p.String() != tc.prefix || what == "")) {
			t.Errorf("SpecialRange(%s) = %s, %q, %v; want %q", tc.addr, p, what, ok, tc.prefix)
		}
	}
}
