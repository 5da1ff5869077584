package sandboxes

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/internal/testnet"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
)

// get fetches http://HOST/hello from inside the sandbox with bash's
// /dev/tcp (the name through the sandbox's resolver, the connection
// through its proxy) and prints the answer, or "connect failed".
const get = `exec 3<>"/dev/tcp/$0/80" || { echo connect failed; exit 0; }
printf "GET /hello HTTP/1.0\r\nHost: %s\r\n\r\n" "$0" >&3
cat <&3`

// TestNetworkGrantRevoke: a running sandbox's egress is granted and
// revoked through the manager; the next connection follows the new rules,
// every change is judged, logged in the network log and the record, and
// a sandbox without a network room says how to get one.
func TestNetworkGrantRevoke(t *testing.T) {
	m, store := newManager(t, Options{})
	in := testnet.New(t)
	m.(*manager).o.Engine.Upstream = engine.Upstream{Resolve: in.Resolve, Dial: in.Dial}
	nm := m.(NetworkManager)
	ctx := context.Background()
	info, err := m.Create(ctx, Spec{Network: &Network{Allow: []string{"api.example.test:80"}}, Resources: map[string]any{"bandwidth": "100Mbit"}})
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(host string) string {
		t.Helper()
		out, errOut, x := collect(t, m, info.ID, ExecRequest{Argv: []string{"bash", "-c", get, host}})
		if x.Exit == nil || x.Exit.ExitCode != 0 {
			t.Fatalf("fetch %s: %+v %s", host, x.Exit, errOut)
		}
		return out
	}
	if got := fetch("api.example.test"); !strings.Contains(got, "200 OK") {
		t.Fatalf("allowed at create: %q", got)
	}
	if got := fetch("data.example.test"); !strings.Contains(got, "connect failed") {
		t.Fatalf("not allowed yet: %q", got)
	}

	n, err := nm.UpdateNetwork(ctx, info.ID, NetworkUpdate{Grant: []string{"data.example.test:80"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(n.Allow, ",") != "api.example.test:80,data.example.test:80" {
		t.Errorf("after the grant: %+v", n)
	}
	if got := fetch("data.example.test"); !strings.Contains(got, "testnet GET data.example.test /hello") {
		t.Fatalf("granted: %q", got)
	}
	if _, err := nm.UpdateNetwork(ctx, info.ID, NetworkUpdate{Revoke: []string{"api.example.test:80"}}); err != nil {
		t.Fatal(err)
	}
	if got := fetch("api.example.test"); !strings.Contains(got, "connect failed") {
		t.Fatalf("revoked: %q", got)
	}
	if n, err := nm.Network(ctx, info.ID); err != nil || strings.Join(n.Allow, ",") != "data.example.test:80" {
		t.Errorf("Network = %+v, %v", n, err)
	}

	for _, c := range []struct {
		u    NetworkUpdate
		want string
	}{
		{NetworkUpdate{}, "give grant, revoke or both"},
		{NetworkUpdate{Revoke: []string{"api.example.test:80"}}, "has no such entry (it has: data.example.test:80)"},
		{NetworkUpdate{Grant: []string{"*"}}, "cannot be enforced"},
	} {
		if _, err := nm.UpdateNetwork(ctx, info.ID, c.u); CodeOf(err) != CodeBadRequest || !strings.Contains(err.Error(), c.want) {
			t.Errorf("UpdateNetwork(%+v) = %v, want bad_request mentioning %q", c.u, err, c.want)
		}
	}

	// The policy judges grants.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "net.rego"), []byte(`package agentsandbox

deny_action contains msg if {
	input.action == "network_grant"
	some e in input.network
	endswith(e, ":80")
	msg := sprintf("%s: plain HTTP is not granted", [e])
}
`), 0o644)
	strict, err := policy.Load(ctx, policy.Options{Dirs: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	m.(PolicySetter).SetPolicy(strict)
	_, err = nm.UpdateNetwork(ctx, info.ID, NetworkUpdate{Grant: []string{"evil.example.test:80"}})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeDenied || !strings.Contains(e.Message, "plain HTTP is not granted") {
		t.Errorf("a denied grant: %v", err)
	}

	// Without network.allow there is no room to change.
	closed, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nm.UpdateNetwork(ctx, closed.ID, NetworkUpdate{Grant: []string{"api.example.test:443"}}); CodeOf(err) != CodeConflict || !strings.Contains(err.Error(), "open it with network.allow") {
		t.Errorf("a grant to a sandbox without network: %v", err)
	}

	// The record has both changes as entries, and the network log their
	// rules lines.
	killed, err := m.Kill(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := record.ParseID(killed.Record)
	rec, err := store.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	var changes []string
	for _, en := range rec.Sandbox.Entries {
		if en.Kind == "network" {
			a, err := store.Action(en.Digest)
			if err != nil {
				t.Fatal(err)
			}
			changes = append(changes, strings.Join(a.Network, ","))
		}
	}
	if strings.Join(changes, " | ") != "api.example.test:80,data.example.test:80 | data.example.test:80" {
		t.Errorf("network entries: %q", changes)
	}
	rc, err := store.OpenBlob(rec.Steps[0].Network.Log)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	log.ReadFrom(rc)
	rc.Close()
	lines, err := egress.ReadLog(&log)
	if err != nil {
		t.Fatal(err)
	}
	var rules int
	for _, l := range lines {
		if l.Rules != nil {
			rules++
		}
	}
	if rules != 2 {
		t.Errorf("%d rules lines in the network log, want 2", rules)
	}
	if problems, err := store.Verify(id); err != nil || len(problems) != 0 {
		t.Errorf("verify: %v %v", problems, err)
	}
}
