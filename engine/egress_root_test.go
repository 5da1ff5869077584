package engine

import (
	"bytes"
	"context"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/internal/testnet"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner/namespace"
)

// egressJob talks HTTP with bash's /dev/tcp (bash is in every Debian root
// the jail binds; no curl needed) and writes what each attempt got to
// out/, one file per attempt.
const egressWorkflow = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: egress
steps:
  - name: e2efetch
    isolation: namespace
    network:
      allow:
        - api.example.test:80
        - "*.example.test:443"
        - meta.example.test:80
        - loop.example.test:80
        - 198.51.100.0/24:443
    resources: {timeout: 60s, bandwidth: 8Mbit}
    outputs: [out]
    run: |
      exec bash -c '
      trap "" PIPE
      mkdir -p out
      get() { # host port path -> out/$4
        if ! exec 3<>"/dev/tcp/$1/$2"; then echo "connect failed" > "out/$4"; return; fi
        printf "GET /%s HTTP/1.0\r\nHost: %s\r\n\r\n" "$3" "$1" >&3
        cat <&3 > "out/$4" || true
        exec 3>&-
      }
      get api.example.test 80 hello allowed
      get data.example.test 80 x wrong-port
      get nowhere.invalid 80 x nxdomain
      get 203.0.113.11 80 x direct-ip
      get meta.example.test 80 x metadata
      get loop.example.test 80 x host-loopback
      get 127.0.0.1 15001 x proxy-itself
      get 198.51.100.7 443 x cidr-allowed
      get 198.51.100.7 80 x cidr-other-port
      get 2001:db8::10 80 x ipv6
      get api.example.test 80 bytes/2000000 big
      for i in 1 2 3 4 5; do
        label=x0tun$(head -c 24 /dev/urandom | od -An -tx1 | tr -d " \n")
        getent ahosts "$label.tunnel.invalid" >> out/tunnel 2>&1 || echo "nxdomain" >> out/tunnel
        getent ahosts "$label.example.test" >> out/tunnel-wildcard 2>&1 || true
      done
      echo ping > /dev/udp/203.0.113.10/123 || true
      cat /etc/resolv.conf > out/resolv.conf
      exit 0'
`

// TestEgressEndToEnd runs a namespace step with network.allow against a
// made-up internet (internal/testnet, in a namespace of its own; the
// step's proxy reaches it through the engine's Upstream, never through the
// host's network): an allowed name is fetched, and every other attempt is
// denied, each for its own reason, in the record's network log.
func TestEgressEndToEnd(t *testing.T) {
	testtier.Root(t)
	in := testnet.New(t)
	before, err := netns.List(netns.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, egressWorkflow)
	stateDir := filepath.Join(f.dir, "host-state")
	o := f.options(t, namespace.New(namespace.Options{StateDir: stateDir, JailDir: filepath.Join(f.dir, "jails")}), nil)
	o.HostStateDir = stateDir
	// Every name the proxies resolve upstream is noted: nothing the job
	// only looked up may reach the internet's resolvers. loop.example.test
	// is a name whose upstream answer is the host's loopback.
	var upstreamMu sync.Mutex
	var upstreamNames []string
	resolve := func(ctx context.Context, host string) ([]netip.Addr, error) {
		upstreamMu.Lock()
		upstreamNames = append(upstreamNames, host)
		upstreamMu.Unlock()
		if host == "loop.example.test" {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
		return in.Resolve(ctx, host)
	}
	o.Upstream = Upstream{Resolve: resolve, Dial: in.Dial}
	var res *Result
	var warnings []string
	o.Events = func(e Event) {
		if e.Kind == EventWarning {
			warnings = append(warnings, e.Line)
		}
	}
	res, err = Run(context.Background(), f.w, o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Succeeded() {
		t.Fatalf("run %s: %+v", res.Record.Status, res.Record.Steps)
	}
	out := exportOutputs(t, f.store, res.ID)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(out, "e2efetch", "out", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read("allowed"); !strings.Contains(got, "200 OK") || !strings.Contains(got, "testnet GET api.example.test /hello") {
		t.Errorf("allowed name: got %q", got)
	}
	for file, want := range map[string]string{
		"wrong-port": "403",
		"direct-ip":  "403",
		"metadata":   "502",
	} {
		if got := read(file); !strings.Contains(got, want) {
			t.Errorf("%s: got %q, want a %s answer from the proxy", file, got, want)
		}
	}
	if got := read("nxdomain"); !strings.Contains(got, "connect failed") {
		t.Errorf("a name the step may not reach resolved: %q", got)
	}
	if got := read("tunnel"); strings.Count(got, "nxdomain") != 5 {
		t.Errorf("random names under a name not allowed resolved: %q", got)
	}
	upstreamMu.Lock()
	for _, n := range upstreamNames {
		if strings.HasPrefix(n, "x0tun") {
			t.Errorf("a name the job only looked up reached the upstream resolver: %s", n)
		}
	}
	upstreamMu.Unlock()
	if got := read("big"); len(got) < 2_000_000 {
		t.Errorf("the 2 MB download got %d bytes", len(got))
	}
	if got := read("resolv.conf"); got != egress.ResolvConf() {
		t.Errorf("the jail's resolv.conf = %q, want %q", got, egress.ResolvConf())
	}

	step := res.Record.Steps[0]
	n := step.Network
	if n == nil {
		t.Fatal("the step's record has no network entry")
	}
	rc, err := f.store.OpenBlob(n.Log)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	lines, err := egress.ReadLog(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var allowed, denied []egress.Conn
	var nx bool
	var drops *egress.Drops
	for _, l := range lines {
		switch {
		case l.Conn != nil && l.Conn.Allow && l.Conn.Error == "":
			allowed = append(allowed, *l.Conn)
		case l.Conn != nil:
			denied = append(denied, *l.Conn)
		case l.Query != nil && l.Query.Name == "nowhere.invalid" && l.Query.Rcode == "NXDOMAIN":
			nx = true
		case l.Drops != nil:
			drops = l.Drops
		}
	}
	// One line per attempt: ten TCP attempts (the NXDOMAIN one never
	// connected).
	if n := len(allowed) + len(denied); n != 10 {
		t.Errorf("%d connection lines, want 10 (one per attempt):\n%s", n, raw)
	}
	if len(allowed) != 3 || allowed[0].Name != "api.example.test" || allowed[0].NameSource != egress.FromDNS ||
		allowed[0].Rule != "api.example.test:80" || allowed[0].Upstream != "203.0.113.10:80" || allowed[0].BytesIn == 0 || allowed[0].BytesOut == 0 {
		t.Errorf("allowed connections = %+v", allowed)
	}
	if c := allowed[1]; c.Rule != "198.51.100.0/24:443" || c.Upstream != "198.51.100.7:443" {
		t.Errorf("the CIDR connection = %+v", c)
	}
	// resources.bandwidth 8Mbit is 1 MB/s through the proxy; the first
	// eighth of a second's worth goes at once (the bucket's burst).
	big := allowed[2]
	if rate := float64(big.BytesIn) / (float64(big.DurationMS) / 1000); big.BytesIn < 2_000_000 || rate > 1.1e6 || rate < 0.9e6 {
		t.Errorf("2 MB at 8Mbit: %d bytes in %d ms, %.0f B/s; want 1e6 ±10%%", big.BytesIn, big.DurationMS, rate)
	}
	hints := map[string]bool{}
	var loop bool
	for _, c := range denied {
		hints[c.Hint] = true
		loop = loop || c.Dst == "127.0.0.1:15001"
	}
	if !loop {
		t.Errorf("the job's direct connection to the proxy's own port is not a denied line: %+v", denied)
	}
	for _, h := range []string{"data.example.test:80", "203.0.113.11:80", "198.51.100.7:80", "[2001:db8::10]:80"} {
		if !hints[h] {
			t.Errorf("no denied connection hints %q: %+v", h, denied)
		}
	}
	if !nx {
		t.Errorf("no NXDOMAIN line for nowhere.invalid in the log:\n%s", raw)
	}
	if drops == nil || drops.Packets == 0 {
		t.Errorf("the firewall's drops (the UDP packet) are not in the log: %+v", drops)
	}
	if n.Allowed != 3 || n.Denied != 5 || n.Failed != 2 || n.Queries == 0 || n.Dropped == 0 {
		t.Errorf("record counts = %+v", n)
	}
	if len(warnings) == 0 || !strings.Contains(strings.Join(warnings, "\n"), "network: denied") {
		t.Errorf("no denied-connection warning reached the events: %q", warnings)
	}
	if problems, err := f.store.Verify(res.ID); err != nil || len(problems) != 0 {
		t.Errorf("verify: %v %v", problems, err)
	}
	after, err := netns.List(netns.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range after {
		// Other packages' tests make namespaces at the same time: only
		// this step's counts.
		if !slices.Contains(before, l) && strings.HasSuffix(l, "-e2efetch") {
			t.Errorf("the step's namespace %s was left behind", l)
		}
	}
}

func exportOutputs(t *testing.T, store *record.Store, id record.ID) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "export")
	exportTo(t, store, id, dir)
	return dir
}
