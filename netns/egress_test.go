package netns

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/google/nftables"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

var update = flag.Bool("update", false, "rewrite the golden rulesets in testdata")

// TestEgressRulesGolden pins the exact firewall of both modes.
func TestEgressRulesGolden(t *testing.T) {
	for _, tc := range []struct {
		file string
		e    Egress
		ifs  egressIfaces
	}{
		{"egress-namespace.nft", Egress{ProxyPort: 15001, EndpointPort: 3128}, egressIfaces{lo: 1, loName: "lo"}},
		{"egress-vm.nft", Egress{ProxyPort: 15001, EndpointPort: 3128, Tap: "tap0"}, egressIfaces{lo: 1, loName: "lo", tap: 3, tapName: "tap0"}},
	} {
		got := renderEgressRules(egressRules(tc.e, tc.ifs))
		p := filepath.Join("testdata", tc.file)
		if *update {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("%v (run go test -run TestEgressRulesGolden -update ./netns/ to write it)", err)
		}
		if got != string(want) {
			t.Errorf("ruleset for %s differs from %s (-update rewrites it):\n%s", tc.e.Tap, p, got)
		}
	}
}

func TestSetupEgressRefusesBadPorts(t *testing.T) {
	n := &NS{name: "unused"}
	for _, e := range []Egress{{}, {ProxyPort: 53}, {ProxyPort: 80, EndpointPort: 80}, {ProxyPort: 80, EndpointPort: 53}} {
		if err := n.SetupEgress(e); err == nil {
			t.Errorf("SetupEgress(%+v) accepted", e)
		}
	}
}

// inside runs fn on a thread switched into ns, as a step's process would.
func inside[T any](t *testing.T, ns *NS, fn func() (T, error)) (T, error) {
	t.Helper()
	var v T
	err := ns.Do(func() error {
		var err error
		v, err = fn()
		return err
	})
	return v, err
}

func counters(t *testing.T, ns *NS) EgressCounters {
	t.Helper()
	c, err := ns.EgressCounters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// acceptOne accepts one connection on l within a few seconds.
func acceptOne(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	if err := l.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("accept on %s: %v", l.Addr(), err)
	}
	return c
}

func listen(t *testing.T, ns *NS, network, addr string) net.Listener {
	t.Helper()
	l, err := ns.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func port(l net.Listener) uint16 { return uint16(l.Addr().(*net.TCPAddr).Port) }

// dumpRuleset logs `nft list ruleset` from inside ns when nft is installed.
func dumpRuleset(t *testing.T, ns *NS) {
	t.Helper()
	nft, err := exec.LookPath("nft")
	if err != nil {
		t.Logf("nft not installed: not listing the ruleset")
		return
	}
	out, err := exec.Command("ip", "netns", "exec", ns.Name(), nft, "list", "ruleset").CombinedOutput()
	if err != nil {
		t.Errorf("nft list ruleset in %s: %v: %s", ns.Name(), err, out)
	}
	t.Logf("nft list ruleset in %s:\n%s", ns.Name(), out)
}

func TestEgressNamespaceMode(t *testing.T) {
	testtier.Root(t)
	ns := create(t)

	proxy := listen(t, ns, "tcp", ":0")
	endpoint := listen(t, ns, "tcp", ":0")
	if err := ns.SetupEgress(Egress{ProxyPort: port(proxy), EndpointPort: port(endpoint)}); err != nil {
		t.Fatal(err)
	}
	dumpRuleset(t, ns)
	if err := ns.SetupEgress(Egress{ProxyPort: port(proxy)}); err == nil {
		t.Error("a second SetupEgress succeeded")
	}
	base := counters(t, ns)

	// TCP anywhere reaches the proxy, which learns where it was going.
	for _, dst := range []string{"203.0.113.10:443", "[2001:db8::10]:80"} {
		client, err := inside(t, ns, func() (net.Conn, error) { return net.DialTimeout("tcp", dst, 5*time.Second) })
		if err != nil {
			t.Fatalf("dial %s from inside the step: %v", dst, err)
		}
		c := acceptOne(t, proxy)
		got, err := OriginalDst(c)
		if err != nil {
			t.Errorf("OriginalDst of the connection to %s: %v", dst, err)
		} else if want := netip.MustParseAddrPort(dst); got != want {
			t.Errorf("OriginalDst = %s, want %s", got, want)
		}
		// The stream works both ways through the redirect.
		if _, err := client.Write([]byte("ping")); err != nil {
			t.Error(err)
		}
		buf := make([]byte, 4)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(buf); err != nil || string(buf) != "ping" {
			t.Errorf("proxy read %q, %v", buf, err)
		}
		client.Close()
		c.Close()
	}

	// The HTTP(S)_PROXY endpoint on the gateway and loopback are not
	// redirected.
	for _, tc := range []struct {
		dst string
		l   net.Listener
	}{
		{netip.AddrPortFrom(egress.Gateway, port(endpoint)).String(), endpoint},
		{netip.AddrPortFrom(egress.Gateway6, port(endpoint)).String(), endpoint},
		{"127.0.0.1:0", listen(t, ns, "tcp4", "127.0.0.1:0")},
		{"[::1]:0", listen(t, ns, "tcp6", "[::1]:0")},
	} {
		dst := tc.dst
		if strings.HasSuffix(dst, ":0") {
			dst = tc.l.Addr().String()
		}
		client, err := inside(t, ns, func() (net.Conn, error) { return net.DialTimeout("tcp", dst, 5*time.Second) })
		if err != nil {
			t.Fatalf("dial %s from inside the step: %v", dst, err)
		}
		c := acceptOne(t, tc.l)
		// Not redirected: the original destination is where it arrived.
		if got, err := OriginalDst(c); err != nil || got.String() != c.LocalAddr().String() {
			t.Errorf("connection to %s: OriginalDst = %s, %v; want its local address %s", dst, got, err, c.LocalAddr())
		}
		c.Close()
		client.Close()
	}
	if err := proxy.(*net.TCPListener).SetDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if c, err := proxy.Accept(); err == nil {
		t.Errorf("the proxy got a connection from %s it should not have", c.RemoteAddr())
		c.Close()
	}
	if c := counters(t, ns); c != base {
		t.Errorf("counters moved on allowed traffic: %+v, were %+v", c, base)
	}

	// UDP anywhere but the resolver is dropped on the way out.
	for _, dst := range []string{"203.0.113.10:53", "203.0.113.10:123", "[2001:db8::10]:53"} {
		before := counters(t, ns)
		_, err := inside(t, ns, func() (struct{}, error) {
			c, err := net.Dial("udp", dst)
			if err != nil {
				return struct{}{}, err
			}
			defer c.Close()
			_, err = c.Write([]byte("x"))
			return struct{}{}, err
		})
		if err != nil && !errors.Is(err, syscall.EPERM) {
			t.Errorf("send UDP to %s: %v, want it sent or refused with EPERM by the firewall", dst, err)
		}
		after := counters(t, ns)
		if after.Output.Packets != before.Output.Packets+1 || after.Output.Bytes <= before.Output.Bytes {
			t.Errorf("UDP to %s: output drop counter %+v -> %+v, want one more packet", dst, before.Output, after.Output)
		}
	}

	// DNS to the gateway reaches the resolver's socket and its answer
	// comes back.
	for _, gw := range []netip.Addr{egress.Gateway, egress.Gateway6} {
		res, err := ns.ListenPacket("udp", netip.AddrPortFrom(gw, 53).String())
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			buf := make([]byte, 64)
			n, from, err := res.ReadFrom(buf)
			if err == nil {
				res.WriteTo(append([]byte("re:"), buf[:n]...), from)
			}
		}()
		got, err := inside(t, ns, func() (string, error) {
			c, err := net.Dial("udp", netip.AddrPortFrom(gw, 53).String())
			if err != nil {
				return "", err
			}
			defer c.Close()
			if _, err := c.Write([]byte("q")); err != nil {
				return "", err
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 64)
			n, err := c.Read(buf)
			return string(buf[:n]), err
		})
		res.Close()
		if err != nil || got != "re:q" {
			t.Errorf("DNS over UDP to %s: got %q, %v", gw, got, err)
		}
	}

	// ICMP echo out is dropped and counted.
	before := counters(t, ns)
	_, err := inside(t, ns, func() (struct{}, error) {
		c, err := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		if err != nil {
			return struct{}{}, err
		}
		defer c.Close()
		m := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 7, Seq: 1, Data: []byte("x")}}
		b, err := m.Marshal(nil)
		if err != nil {
			return struct{}{}, err
		}
		_, err = c.WriteTo(b, &net.IPAddr{IP: net.ParseIP("203.0.113.10")})
		return struct{}{}, err
	})
	if err != nil && !errors.Is(err, syscall.EPERM) {
		t.Errorf("ping 203.0.113.10: %v", err)
	}
	if after := counters(t, ns); after.Output.Packets != before.Output.Packets+1 {
		t.Errorf("ping: output drop counter %+v -> %+v, want one more packet", before.Output, after.Output)
	}
}

func TestEgressVMModeRules(t *testing.T) {
	testtier.Root(t)
	ns := create(t)
	tap := "asbt" + fmt.Sprintf("%x", sha256Sum(ns.Name())[:4])
	if _, err := ns.CreateTap(Tap{Name: tap, VnetHdr: true}); err != nil {
		t.Fatal(err)
	}
	if err := ns.SetupEgress(Egress{ProxyPort: 15001, EndpointPort: 3128, Tap: tap}); err != nil {
		t.Fatal(err)
	}
	dumpRuleset(t, ns)

	h, err := ns.Handle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	link, err := h.LinkByName(tap)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := h.AddrList(link, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range addrs {
		if !a.IP.IsLinkLocalUnicast() {
			got = append(got, a.IPNet.String())
		}
	}
	if strings.Join(got, " ") != "198.18.0.1/24 fd61:7362::1/64" {
		t.Errorf("tap addresses = %v, want the gateway's", got)
	}
	if _, err := h.LinkByName(EgressLink); err == nil {
		t.Errorf("VM mode made the link %s", EgressLink)
	}

	chains, err := ns.listEgressChains()
	if err != nil {
		t.Fatal(err)
	}
	type hook struct {
		typ      nftables.ChainType
		hook     nftables.ChainHook
		priority nftables.ChainPriority
		policy   nftables.ChainPolicy
	}
	want := map[string]hook{
		"nat_output":     {nftables.ChainTypeNAT, *nftables.ChainHookOutput, -100, nftables.ChainPolicyAccept},
		"nat_prerouting": {nftables.ChainTypeNAT, *nftables.ChainHookPrerouting, -100, nftables.ChainPolicyAccept},
		"output":         {nftables.ChainTypeFilter, *nftables.ChainHookOutput, 0, nftables.ChainPolicyDrop},
		"input":          {nftables.ChainTypeFilter, *nftables.ChainHookInput, 0, nftables.ChainPolicyDrop},
		"forward":        {nftables.ChainTypeFilter, *nftables.ChainHookForward, 0, nftables.ChainPolicyDrop},
	}
	ifs := egressIfaces{lo: 1, loName: "lo", tap: link.Attrs().Index, tapName: tap}
	rules := map[string]int{}
	for _, c := range egressRules(Egress{ProxyPort: 15001, EndpointPort: 3128, Tap: tap}, ifs) {
		rules[c.Name] = len(c.Rules)
	}
	conn, err := ns.conn()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chains {
		w, ok := want[c.Name]
		if !ok {
			t.Errorf("unexpected chain %s", c.Name)
			continue
		}
		delete(want, c.Name)
		g := hook{c.Type, *c.Hooknum, *c.Priority, *c.Policy}
		if g != w {
			t.Errorf("chain %s = %+v, want %+v", c.Name, g, w)
		}
		rs, err := conn.GetRules(c.Table, c)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != rules[c.Name] {
			t.Errorf("chain %s has %d rules in the kernel, want %d", c.Name, len(rs), rules[c.Name])
		}
	}
	for name := range want {
		t.Errorf("chain %s missing", name)
	}
	if c := counters(t, ns); c != (EgressCounters{}) {
		t.Errorf("fresh counters = %+v", c)
	}
}
