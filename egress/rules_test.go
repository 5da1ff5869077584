package egress

import (
	"errors"
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

// hostSet is a fake HostAddrs.
type hostSet []string

func (h hostSet) HostAddr(a netip.Addr) (bool, error) {
	for _, x := range h {
		if x == "error" {
			return false, errors.New("netlink: permission denied")
		}
		if netip.MustParseAddr(x) == a {
			return true, nil
		}
	}
	return false, nil
}

func TestCheckUpstream(t *testing.T) {
	host := hostSet{"192.0.2.2", "2001:db8:1::2", "fe80::1"}
	for _, tc := range []struct {
		name     string
		allow    []string
		deny     []string
		internal []string
		addr     string
		port     uint16
		err      string // "" for allowed
	}{
		{"public", nil, nil, nil, "93.184.216.34", 443, ""},
		{"public v6", nil, nil, nil, "2606:2800:220:1::1", 443, ""},
		{"metadata", nil, nil, nil, "169.254.169.254", 80, "link-local"},
		{"metadata v4-mapped", nil, nil, nil, "::ffff:169.254.169.254", 80, "link-local"},
		{"metadata with everything allowed", []string{"0.0.0.0/0"}, nil, nil, "169.254.169.254", 80, "unless the operator's policy data opens them (data.agentsandbox.egress_internal)"},
		// A client's rule never opens an internal address, however exactly it names it.
		{"metadata named exactly by the client", []string{"169.254.169.254/32:80"}, nil, nil, "169.254.169.254", 80, "link-local"},
		{"loopback named exactly by the client", []string{"127.0.0.1/32:8080"}, nil, nil, "127.0.0.1", 8080, "loopback"},
		{"private in 10/8 by the client", []string{"10.0.0.0/8"}, nil, nil, "10.1.2.3", 5432, "a private address (10.0.0.0/8)"},
		// The operator's data does.
		{"metadata opened by the operator", nil, nil, []string{"169.254.169.254:80"}, "169.254.169.254", 80, ""},
		{"metadata opened on another port", nil, nil, []string{"169.254.169.254:80"}, "169.254.169.254", 8080, "link-local"},
		{"private opened by the operator", nil, nil, []string{"10.1.0.0/16"}, "10.1.2.3", 5432, ""},
		{"private outside the opening", nil, nil, []string{"10.2.0.0/16"}, "10.1.2.3", 5432, "private"},
		{"loopback", []string{"0.0.0.0/0"}, nil, nil, "127.0.0.1", 80, "loopback"},
		{"loopback v6", []string{"::/0"}, nil, nil, "::1", 80, "loopback"},
		{"the resolver's own range", nil, nil, nil, "198.19.0.1", 80, "benchmarking"},
		{"shared", nil, nil, nil, "100.64.0.1", 80, "shared"},
		{"unique local v6", nil, nil, nil, "fd00:ec2::254", 80, "unique local"},
		{"link-local v6", nil, nil, nil, "fe80::1", 80, "link-local"},
		{"multicast", nil, nil, nil, "224.0.0.1", 80, "multicast"},
		{"this network", nil, nil, nil, "0.0.0.0", 80, "unspecified"},
		// The host's own addresses are in no special range, and refused.
		{"the host's address", nil, nil, nil, "192.0.2.2", 22, "192.0.2.2, one of this host's own addresses"},
		{"the host's v6 address", nil, nil, nil, "2001:db8:1::2", 22, "one of this host's own addresses"},
		{"the host's address mapped", nil, nil, nil, "::ffff:192.0.2.2", 22, "one of this host's own addresses"},
		{"the host's address as 6to4", nil, nil, nil, "2002:c000:202::1", 22, "carries 192.0.2.2, one of this host's own addresses as 6to4"},
		{"the host's address as NAT64", nil, nil, nil, "64:ff9b::c000:202", 22, "one of this host's own addresses as NAT64"},
		{"the host's address opened by the operator", nil, nil, []string{"192.0.2.2:8080"}, "192.0.2.2", 8080, ""},
		{"a neighbour of the host", nil, nil, nil, "192.0.2.3", 22, ""},
		{"the host's addresses unreadable", nil, nil, nil, "93.184.216.34", 443, "netlink: permission denied"},
		// Embedded IPv4 is judged as its IPv4.
		{"IPv4-compatible loopback", []string{"::/0"}, nil, nil, "::7f00:1", 80, "carries 127.0.0.1, a loopback address (127.0.0.0/8) as IPv4-compatible"},
		{"IPv4-translated metadata", nil, nil, nil, "::ffff:0:a9fe:a9fe", 80, "as IPv4-translated"},
		{"6to4 loopback", []string{"::/0"}, nil, nil, "2002:7f00:1::1", 80, "carries 127.0.0.1, a loopback address (127.0.0.0/8) as 6to4"},
		{"6to4 private", nil, nil, nil, "2002:a01:203::", 80, "carries 10.1.2.3"},
		{"6to4 public", nil, nil, nil, "2002:5db8:d822::1", 80, ""},
		{"Teredo with a loopback server", nil, nil, nil, "2001:0:7f00:1::", 80, "as Teredo (server)"},
		// 3fff:fdd2 is 192.0.2.45 inverted (RFC 4380's example): public.
		{"Teredo, RFC 4380's example", nil, nil, nil, "2001:0:4136:e378:8000:63bf:3fff:fdd2", 80, ""},
		// 80ff:fefe is 127.1.1.1 inverted.
		{"Teredo with a loopback client", nil, nil, nil, "2001:0:4136:e378:8000:63bf:80fe:fefe", 80, "carries 127.1.1.1, a loopback address (127.0.0.0/8) as Teredo (client)"},
		{"NAT64 of metadata", nil, nil, nil, "64:ff9b::a9fe:a9fe", 80, "carries 169.254.169.254"},
		{"NAT64 of private", []string{"::/0"}, nil, nil, "64:ff9b::a01:203", 80, "carries 10.1.2.3, a private address (10.0.0.0/8) as NAT64"},
		{"NAT64 of a private address the operator opened", nil, nil, []string{"10.0.0.0/8"}, "64:ff9b::a01:203", 80, ""},
		{"NAT64 of denied", nil, []string{"93.184.216.0/24"}, nil, "64:ff9b::5db8:d822", 80, "carries 93.184.216.34 (NAT64), which the policy forbids"},
		{"6to4 of denied", nil, []string{"93.184.216.0/24"}, nil, "2002:5db8:d822::1", 80, "which the policy forbids"},
		{"NAT64 of public", nil, nil, nil, "64:ff9b::5db8:d822", 80, ""},
		{"local-use NAT64", nil, nil, nil, "64:ff9b:1::5db8:d822", 80, "local-use NAT64"},
		{"local-use NAT64 opened, carrying loopback", nil, nil, []string{"64:ff9b:1::/48"}, "64:ff9b:1::7f00:1", 80, "carries 127.0.0.1"},
		{"deny wins over an opening", nil, []string{"10.1.0.0/16"}, []string{"10.0.0.0/8"}, "10.1.2.3", 80, "forbidden by the policy"},
		{"deny public", nil, []string{"93.184.216.0/24"}, nil, "93.184.216.34", 443, "forbidden by the policy"},
		{"deny on another port", nil, []string{"93.184.216.0/24:25"}, nil, "93.184.216.34", 443, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := Operator{Deny: tc.deny, Internal: tc.internal}.Rules(tc.allow)
			if err != nil {
				t.Fatal(err)
			}
			h := host
			if strings.Contains(tc.err, "permission denied") {
				h = hostSet{"error"}
			}
			err = rs.CheckUpstream(netip.AddrPortFrom(netip.MustParseAddr(tc.addr), tc.port), h)
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
		what   string
	}{
		{"169.254.169.254", "169.254.0.0/16", "link-local"},
		{"172.31.255.255", "172.16.0.0/12", "private"},
		{"172.32.0.0", "", ""},
		{"192.168.1.1", "192.168.0.0/16", "private"},
		{"255.255.255.255", "240.0.0.0/4", "reserved"},
		{"::ffff:127.0.0.1", "127.0.0.0/8", "loopback"},
		{"::7f00:1", "127.0.0.0/8", "loopback address, carried as IPv4-compatible by ::7f00:1"},
		{"2002:a9fe:a9fe::1", "169.254.0.0/16", "carried as 6to4"},
		{"fec0::1", "fec0::/10", "site-local"},
		{"::", "::/128", "unspecified"},
		{"::1", "::1/128", "loopback"},
		{"8.8.8.8", "", ""},
		{"2001:4860:4860::8888", "", ""},
		{"2002:808:808::1", "", ""},
	} {
		p, what, ok := SpecialRange(netip.MustParseAddr(tc.addr))
		if ok != (tc.prefix != "") || (ok && (p.String() != tc.prefix || !strings.Contains(what, tc.what))) {
			t.Errorf("SpecialRange(%s) = %s, %q, %v; want %q %q", tc.addr, p, what, ok, tc.prefix, tc.what)
		}
	}
}

func TestEmbedded(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want string // "addr via; ..."
	}{
		{"192.0.2.1", ""},
		{"2001:db8::1", ""},
		{"::", ""},
		{"::1", ""},
		{"::ffff:192.0.2.1", "192.0.2.1 IPv4-mapped"},
		{"::ffff:0:c000:201", "192.0.2.1 IPv4-translated"},
		{"::c000:201", "192.0.2.1 IPv4-compatible"},
		{"2002:c000:201:5::9", "192.0.2.1 6to4"},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "65.54.227.120 Teredo (server); 192.0.2.45 Teredo (client)"},
		{"64:ff9b::c000:201", "192.0.2.1 NAT64"},
		{"64:ff9b:1:2::c000:201", "192.0.2.1 local-use NAT64"},
		{"fe80::c000:201%eth0", ""},
	} {
		var got []string
		for _, c := range Embedded(netip.MustParseAddr(tc.addr)) {
			got = append(got, c.Addr.String()+" "+c.Via)
		}
		if strings.Join(got, "; ") != tc.want {
			t.Errorf("Embedded(%s) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

func TestClassifyPrefix(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		want   string // "" for not internal; else a part of the String
	}{
		{"127.0.0.1/32", "a loopback address (127.0.0.0/8)"},
		{"127.0.0.0/8", "loopback"},
		{"126.0.0.0/7", ""}, // overlaps loopback, holds public addresses
		{"0.0.0.0/0", ""},
		{"169.254.169.254/32", "link-local"},
		{"10.20.0.0/16", "private"},
		{"203.0.113.0/24", ""},
		{"::1/128", "loopback"},
		{"fd00::/8", "unique local"},
		{"::ffff:10.0.0.0/104", "10.0.0.0, a private address"},
		{"::7f00:0/104", "127.0.0.0, a loopback address"},
		{"2002:7f00::/24", "127.0.0.0, a loopback address"},
		{"2002::/16", ""},
		{"2002:a9fe:a9fe::/48", "169.254.169.254"},
		{"64:ff9b::a9fe:a9fe/128", "169.254.169.254"},
		{"64:ff9b::/96", ""},
		{"2001:0:7f00::/40", "loopback"},
		{"2001::/32", ""},
		{"2001:0:4136:e378:8000:63bf:80fe:fefe/128", "127.1.1.1"},
		{"2001:db8::/32", ""},
	} {
		in, ok := ClassifyPrefix(netip.MustParsePrefix(tc.prefix))
		if ok != (tc.want != "") || (ok && !strings.Contains(in.String(), tc.want)) {
			t.Errorf("ClassifyPrefix(%s) = %q, %v; want %q", tc.prefix, in, ok, tc.want)
		}
	}
}

// A network.allow entry that names only internal addresses is one
// admission refuses unless the operator's egress_internal opens it.
func TestInternalEntry(t *testing.T) {
	for _, tc := range []struct {
		entry    string
		internal []string
		want     bool
	}{
		{"127.0.0.1/32:8080", nil, true},
		{"169.254.169.254:80", nil, true},
		{"10.0.0.0/8:5432", nil, true},
		{"[fd00::1]:443", nil, true},
		{"[2002:7f00:1::1]:80", nil, true},
		{"[64:ff9b::a9fe:a9fe]:80", nil, true},
		{"api.example.com:443", nil, false},
		{"0.0.0.0/1:443", nil, false},
		{"203.0.113.5:22", nil, false},
		{"169.254.169.254:80", []string{"169.254.169.254:80"}, false},
		{"169.254.169.254:80", []string{"169.254.0.0/16"}, false},
		{"169.254.169.254:8080", []string{"169.254.169.254:80"}, true},
		{"169.254.169.254", []string{"169.254.169.254:80"}, true}, // all ports asked, one opened
		{"10.1.0.0/16:5432", []string{"10.0.0.0/8"}, false},
		{"10.0.0.0/8:5432", []string{"10.1.0.0/16"}, true},
		{"[64:ff9b::a01:203]:5432", []string{"10.0.0.0/8"}, false},
	} {
		r, err := ParseRule(tc.entry)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := Operator{Internal: tc.internal}.Rules(nil)
		if err != nil {
			t.Fatal(err)
		}
		in, got := InternalEntry(r, rs.Internal)
		if got != tc.want {
			t.Errorf("InternalEntry(%s, %q) = %v (%s), want %v", tc.entry, tc.internal, got, in, tc.want)
		}
	}
}

func TestParseInternal(t *testing.T) {
	for _, e := range []string{"169.254.169.254:80", "10.0.0.0/8", "[fd00::/8]:443", "192.0.2.2"} {
		if _, err := ParseInternal(e); err != nil {
			t.Errorf("ParseInternal(%q): %v", e, err)
		}
	}
	for _, e := range []string{"metadata.google.internal", "*.internal:80", "*", "10.0.0.0/8:0"} {
		if _, err := ParseInternal(e); err == nil || !strings.Contains(err.Error(), "egress_internal") {
			t.Errorf("ParseInternal(%q) = %v, want an error naming egress_internal", e, err)
		}
	}
}
