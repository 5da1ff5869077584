package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/runnertest"
	"github.com/agentsandbox/agentsandbox/internal/testnet"
	"github.com/agentsandbox/agentsandbox/internal/vmfixture"
	"github.com/agentsandbox/agentsandbox/microvm"
	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/netns/egress/gateway"
	"github.com/agentsandbox/agentsandbox/nixgen"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/vishvananda/netlink"
)

// guestNetScript configures eth0 the way the NixOS guest module does
// (nixgen's step module: nixgen.GuestAddress, 198.18.0.2/24, with the
// default route and the only nameserver at the host's end of the tap,
// egress.Gateway), as the guest's root, with the fixture's busybox.
var guestNetScript = fmt.Sprintf(`busybox ip link set eth0 up
busybox ip addr add %[1]s dev eth0
busybox ip route add default via %[2]s
echo 'nameserver %[2]s' > /etc/resolv.conf
`, nixgen.GuestAddress, egress.Gateway)

// watchedEgress is a step's gateway that, when the backend stops it (the
// VM has ended, the namespace still exists), looks at the tap's root
// qdisc first.
type watchedEgress struct {
	*gateway.Gateway
	mu    sync.Mutex
	room  netns.EgressRoom
	tap   string
	qdisc netlink.Qdisc
	err   error
}

func (w *watchedEgress) Start(room netns.EgressRoom, tap string) error {
	w.mu.Lock()
	w.room, w.tap = room, tap
	w.mu.Unlock()
	return w.Gateway.Start(room, tap)
}

func (w *watchedEgress) Stop() error {
	w.mu.Lock()
	if ns, ok := w.room.(*netns.NS); ok && w.qdisc == nil && w.err == nil {
		w.qdisc, w.err = rootQdisc(ns, w.tap)
	}
	w.mu.Unlock()
	return w.Gateway.Stop()
}

func rootQdisc(ns *netns.NS, link string) (netlink.Qdisc, error) {
	h, err := ns.Handle()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	l, err := h.LinkByName(link)
	if err != nil {
		return nil, err
	}
	qs, err := h.QdiscList(l)
	if err != nil {
		return nil, err
	}
	for _, q := range qs {
		if q.Attrs().Parent == netlink.HANDLE_ROOT {
			return q, nil
		}
	}
	return nil, errors.New("no root qdisc")
}

// TestEgressFromGuest boots the fixture guest with the tap a generated
// runner has (microvm.TapID, microvm.GuestMAC) and gives the step a gateway
// whose upstream is testnet's made-up internet. The guest's root configures
// eth0 as the NixOS guest module does and fetches with busybox wget: the
// allowed name is answered through the proxy; a name allowed on another
// port, a direct address and a name not allowed at all fail; the log has
// each connection with how the name was learnt, its upstream or hint, the
// queries, and the firewall's drop of the guest's ping to the tap. The
// tap's transmit queue is shaped to the step's bandwidth (a tbf, looked at
// when the backend stops the egress), and the step's namespace, cgroup and
// state file are gone afterwards (checked).
func TestEgressFromGuest(t *testing.T) {
	fixture(t)
	in := testnet.New(t)
	allow := []string{"api.example.test:80", "data.example.test:443"}
	rules, err := egress.NewRules(allow, nil)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{Step: "fetch", Rules: rules, Bandwidth: 10_000_000 / 8, Resolve: in.Resolve, Dial: in.Dial})
	if err != nil {
		t.Fatal(err)
	}
	eg := &watchedEgress{Gateway: gw}
	script := guestNetScript + `
try() { # name url (busybox 1.35's wget crashes with -T: timeout bounds it)
  if timeout 30 wget -q -O "$1.out" "$2"; then echo "$1 ok"; else echo "$1 failed"; fi
}
try allowed http://api.example.test/hello
try wrong-port http://data.example.test/x
try direct-ip http://203.0.113.11/x
try not-allowed http://evil.example.test/x
if ping -c 1 -W 2 ` + egress.Gateway.String() + ` > /dev/null 2>&1; then echo "ping answered"; else echo "ping dropped"; fi
exit 0
`
	s := spec(t, "fetch", runnertest.Sh(script))
	s.Job.UID, s.Job.GID = 0, 0
	s.Step.Network.Allow = allow
	s.Step.Resources.Bandwidth = 10_000_000 // bits per second
	s.Egress = eg
	tapRunner(t, &s, vmfixture.Interface{ID: microvm.TapID, MAC: microvm.GuestMAC})
	res := runnertest.RunStep(t, checked{t: t, b: newBackend(t, Options{})}, s)
	console := runnertest.ReadLog(t, s, ConsoleLog)
	if res.Status != vmrunner.StatusSucceeded {
		t.Fatalf("result %+v; console:\n%s", res, console)
	}
	if got, want := runnertest.ReadLog(t, s, guest.StdoutFile), "allowed ok\nwrong-port failed\ndirect-ip failed\nnot-allowed failed\nping dropped\n"; got != want {
		t.Errorf("the guest's fetches:\n%s\nwant:\n%s\nstderr:\n%s\nconsole:\n%s", got, want, runnertest.ReadLog(t, s, guest.StderrFile), console)
	}
	stderr := runnertest.ReadLog(t, s, guest.StderrFile)
	if strings.Count(stderr, "403 Forbidden") != 2 || !strings.Contains(stderr, "bad address 'evil.example.test'") {
		t.Errorf("the guest's stderr = %q, want two 403s from the proxy and a name that did not resolve", stderr)
	}
	if got := readWorkspace(t, s, "allowed.out"); !strings.Contains(got, "testnet GET api.example.test /hello") {
		t.Errorf("allowed fetch got %q, want testnet's answer", got)
	}

	if eg.tap != microvm.TapID {
		t.Errorf("egress started on tap %q, want %q", eg.tap, microvm.TapID)
	}
	if tbf, ok := eg.qdisc.(*netlink.Tbf); !ok || tbf.Rate != 10_000_000/8 {
		t.Errorf("the tap's root qdisc = %#v (%v), want a tbf at %d bytes/s", eg.qdisc, eg.err, 10_000_000/8)
	}

	raw := gw.Log()
	t.Logf("network log:\n%s", raw)
	lines, err := egress.ReadLog(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var allowed, denied []egress.Conn
	queries := map[string]string{} // name → rcode of its A query
	var drops *egress.Drops
	for _, l := range lines {
		switch {
		case l.Conn != nil && l.Conn.Allow && l.Conn.Error == "":
			allowed = append(allowed, *l.Conn)
		case l.Conn != nil:
			denied = append(denied, *l.Conn)
		case l.Query != nil && l.Query.QType == "A":
			queries[l.Query.Name] = l.Query.Rcode
		case l.Drops != nil:
			drops = l.Drops
		}
	}
	if len(allowed) != 1 || allowed[0].Name != "api.example.test" || allowed[0].NameSource != egress.FromDNS ||
		allowed[0].Upstream != "203.0.113.10:80" || allowed[0].BytesIn == 0 || allowed[0].BytesOut == 0 {
		t.Errorf("allowed connections = %+v\nlog:\n%s", allowed, raw)
	}
	hints := map[string]bool{}
	for _, c := range denied {
		hints[c.Hint] = true
	}
	for _, h := range []string{"data.example.test:80", "203.0.113.11:80"} {
		if !hints[h] {
			t.Errorf("no denied connection hints %q: %+v\nlog:\n%s", h, denied, raw)
		}
	}
	for name, want := range map[string]string{"api.example.test": "NOERROR", "data.example.test": "NOERROR", "evil.example.test": "NXDOMAIN"} {
		if got := queries[name]; got != want {
			t.Errorf("A query for %s: rcode %q, want %q\nlog:\n%s", name, got, want, raw)
		}
	}
	if drops == nil || drops.By["input"] == 0 {
		t.Errorf("the firewall's drops (the guest's ping to the tap's address) = %+v, want input drops\nlog:\n%s", drops, raw)
	}
}

// egressSpec readies a conformance step with egress as a generated runner
// and its NixOS guest would be: a runner with the tap, and the guest
// module's network setup (guestNetScript, as the guest's root) before the
// job's command.
func egressSpec(t *testing.T, s *vmrunner.StepSpec) {
	tapRunner(t, s, vmfixture.Interface{ID: microvm.TapID, MAC: microvm.GuestMAC})
	s.Job.UID, s.Job.GID = 0, 0
	s.Job.Command = append([]string{"sh", "-c", guestNetScript + `exec "$@"`, "sh"}, s.Job.Command...)
}

// TestEgressNeedsATap: a step with egress whose runner has no tap was not
// built for egress; it fails before the VM starts, saying so, and leaves
// nothing behind.
func TestEgressNeedsATap(t *testing.T) {
	fixture(t)
	rules, err := egress.NewRules([]string{"api.example.test:80"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{Step: "notap", Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	s := spec(t, "notap", runnertest.Sh("true"))
	s.Step.Network.Allow = []string{"api.example.test:80"}
	s.Egress = gw
	_, err = vmrunner.RunStep(context.Background(), checked{t: t, b: newBackend(t, Options{})}, s)
	if err == nil || !strings.Contains(err.Error(), "no tap interface") || !strings.Contains(err.Error(), "rebuild the step's runner") {
		t.Fatalf("Run = %v, want an error saying the runner has no tap for egress", err)
	}
}

func readWorkspace(t *testing.T, s vmrunner.StepSpec, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.Workspace, name))
	if err != nil {
		t.Errorf("read the workspace's %s: %v", name, err)
	}
	return string(b)
}
