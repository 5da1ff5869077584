package sandboxes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/namespace"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// TestMain builds the sandbox agent, every jail's init.
func TestMain(m *testing.M) {
	os.Exit(testtier.MainWithAgent(m))
}

func newManager(t testing.TB, o Options) (Manager, *record.Store) {
	t.Helper()
	testtier.Root(t)
	dir := t.TempDir()
	store, err := record.OpenStore(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(context.Background(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hostState := filepath.Join(dir, "host-state")
	o.Engine = engine.Options{
		Jobs: 1, Host: engine.Host{Root: true, Capacity: o.Engine.Host.Capacity}, Store: store,
		RunRoot: filepath.Join(store.Dir(), "runs"), HostStateDir: hostState,
		Backends: map[workflow.Isolation]vmrunner.Backend{
			workflow.IsolationNamespace: namespace.New(namespace.Options{StateDir: hostState, JailDir: filepath.Join(dir, "jails")}),
		},
		Policy: pol, ToolVersion: "test",
	}
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m, store
}

func collect(t *testing.T, m Manager, id string, r ExecRequest) (string, string, ExecInfo) {
	t.Helper()
	var out, errb strings.Builder
	info, err := m.Exec(context.Background(), id, r, func(ev ExecEvent) error {
		switch ev.Type {
		case EventStdout:
			out.WriteString(ev.Text)
		case EventStderr:
			errb.WriteString(ev.Text)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), info
}

// TestSandboxLifecycle is the real thing: a namespace sandbox opened
// through the engine, commands run many times in the same sandbox (state
// kept between them), files put and read beneath the workspace, a
// background command, and a kill that closes a verifiable record and
// leaves nothing on the host.
func TestSandboxLifecycle(t *testing.T) {
	m, store := newManager(t, Options{})
	ctx := context.Background()
	before, _ := netns.List(netns.Prefix)
	info, err := m.Create(ctx, Spec{Resources: map[string]any{"memory": "256MiB", "timeout": "1m"}, Labels: map[string]string{"agent": "t1"}, Env: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if info.State != StateRunning || info.Isolation != "namespace" {
		t.Fatalf("created: %+v", info)
	}
	id := info.ID

	out, _, x := collect(t, m, id, ExecRequest{Shell: "echo $GREETING > state.txt; id -u; exit 3"})
	if strings.TrimSpace(out) != "65534" || x.Exit == nil || x.Exit.ExitCode != 3 {
		t.Fatalf("exec: out %q, info %+v", out, x)
	}
	out, _, _ = collect(t, m, id, ExecRequest{Argv: []string{"cat", "state.txt"}})
	if out != "hi\n" {
		t.Errorf("the second command does not see the first's file: %q", out)
	}
	stdin := "line one\nline two\n"
	out, _, _ = collect(t, m, id, ExecRequest{Argv: []string{"wc", "-l"}, Stdin: &stdin})
	if strings.TrimSpace(out) != "2" {
		t.Errorf("stdin: %q", out)
	}
	_, _, x = collect(t, m, id, ExecRequest{Argv: []string{"sleep", "5"}, Timeout: Duration(300 * time.Millisecond)})
	if x.Exit == nil || !x.Exit.TimedOut {
		t.Errorf("timeout: %+v", x.Exit)
	}

	fi, err := m.PutFile(ctx, id, "data/in.csv", strings.NewReader("a,b\n1,2\n"), 0o640)
	if err != nil || fi.Size != 8 || fi.Mode != "0640" || fi.SHA256 == "" {
		t.Fatalf("put: %+v %v", fi, err)
	}
	out, _, _ = collect(t, m, id, ExecRequest{Shell: "cat data/in.csv | wc -l; echo made > data/out.txt"})
	if strings.TrimSpace(out) != "2" {
		t.Errorf("the command does not see the put file: %q", out)
	}
	var got bytes.Buffer
	if _, err := m.GetFile(ctx, id, "data/out.txt", &got); err != nil || got.String() != "made\n" {
		t.Errorf("get: %q %v", got.String(), err)
	}
	list, err := m.ListFiles(ctx, id, "data")
	if err != nil || len(list) != 2 {
		t.Errorf("ls data: %+v %v", list, err)
	}
	// The job plants a symlink to the host's /etc: the files API never
	// follows it.
	collect(t, m, id, ExecRequest{Shell: "ln -s /etc/shadow shadow; ln -s / root"})
	for _, p := range []string{"shadow", "root/etc/passwd", "../x", "/etc/passwd"} {
		var b bytes.Buffer
		_, err := m.GetFile(ctx, id, p, &b)
		if code := CodeOf(err); code != CodeBadRequest && code != CodeNotFound {
			t.Errorf("get %q: %v (code %s), %d bytes", p, err, code, b.Len())
		}
	}
	if _, err := m.PutFile(ctx, id, "root/tmp/escape", strings.NewReader("x"), 0); CodeOf(err) != CodeBadRequest {
		t.Errorf("put through a symlink: %v", err)
	}

	bg, err := m.Exec(ctx, id, ExecRequest{Shell: "for i in 1 2 3; do echo tick $i; sleep 0.1; done", Background: true}, nil)
	if err != nil || bg.ID == "" {
		t.Fatalf("background: %+v %v", bg, err)
	}
	var ticks strings.Builder
	var exit *ExitStatus
	if err := m.Output(ctx, id, bg.ID, 0, 0, true, func(ev ExecEvent) error {
		ticks.WriteString(ev.Text)
		if ev.Exit != nil {
			exit = ev.Exit
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if ticks.String() != "tick 1\ntick 2\ntick 3\n" || exit == nil || exit.ExitCode != 0 {
		t.Errorf("background output %q, exit %+v", ticks.String(), exit)
	}
	// Replay from an offset.
	var tail strings.Builder
	m.Output(ctx, id, bg.ID, 7, 0, false, func(ev ExecEvent) error { tail.WriteString(ev.Text); return nil })
	if tail.String() != "tick 2\ntick 3\n" {
		t.Errorf("output from offset 7: %q", tail.String())
	}

	list2, _ := m.List(ctx, map[string]string{"agent": "t1"})
	if len(list2) != 1 {
		t.Errorf("list by label: %d", len(list2))
	}
	if got, _ := m.Get(ctx, id); got.Usage.CPUTimeNs == 0 {
		t.Errorf("no live usage: %+v", got.Usage)
	}

	killed, err := m.Kill(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if killed.State != StateStopped || killed.Record == "" {
		t.Fatalf("killed: %+v", killed)
	}
	if _, err := m.Exec(ctx, id, ExecRequest{Argv: []string{"true"}}, nil); CodeOf(err) != CodeConflict {
		t.Errorf("exec after kill: %v", err)
	}
	rid, err := store.Resolve(killed.Record)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := store.Get(rid)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Sandbox == nil || rec.Sandbox.Ended != "killed" || len(rec.Sandbox.Entries) != 8 {
		t.Fatalf("record: %+v", rec.Sandbox)
	}
	if p, err := store.Verify(rid); err != nil || len(p) != 0 {
		t.Errorf("verify: %v %v", p, err)
	}
	a, err := store.Action(rec.Sandbox.Entries[0].Digest)
	if err != nil || a.Kind != "exec" || a.ExitCode == nil || *a.ExitCode != 3 || a.Stdout == nil {
		t.Errorf("first entry: %+v %v", a, err)
	}
	for _, n := range a.EnvNames {
		if strings.Contains(n, "=") {
			t.Errorf("an env value reached the record: %q", n)
		}
	}
	after, _ := netns.List(netns.Prefix)
	for _, n := range after {
		if !contains(before, n) && strings.Contains(n, id[:8]) {
			t.Errorf("namespace left: %s", n)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(store.Dir(), "runs")); len(entries) != 0 {
		t.Errorf("sandbox directories left: %v", entries)
	}
}

// TestExecCwdAndLeftovers: the exec's cwd is resolved by the agent, one
// the protocol refuses is a bad request, and what a command left in its
// process group does not outlive it.
func TestExecCwdAndLeftovers(t *testing.T) {
	m, _ := newManager(t, Options{})
	ctx := context.Background()
	info, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	defer m.Kill(ctx, id)
	if _, err := m.PutFile(ctx, id, "data/x", strings.NewReader("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The agent resolves the cwd (guest.SessionRequest.ExecJob): none is
	// the workspace, a relative one is beneath it.
	for cwd, want := range map[string]string{"": guest.WorkspaceMount, "data": guest.WorkspaceMount + "/data", "/tmp": "/tmp"} {
		if out, _, _ := collect(t, m, id, ExecRequest{Argv: []string{"pwd"}, Cwd: cwd}); out != want+"\n" {
			t.Errorf("cwd %q: pwd %q, want %q", cwd, out, want)
		}
	}
	if _, err := m.Exec(ctx, id, ExecRequest{Argv: []string{"pwd"}, Cwd: "a\x00b"}, nil); CodeOf(err) != CodeBadRequest {
		t.Errorf("a cwd with a NUL byte: %v, want a bad request", err)
	}
	// What a command leaves in its process group goes when it ends.
	out, _, _ := collect(t, m, id, ExecRequest{Shell: "sleep 300 & echo $!"})
	if out, _, _ = collect(t, m, id, ExecRequest{Shell: "sleep 0.2; kill -0 " + strings.TrimSpace(out) + " 2>/dev/null && echo alive || echo gone"}); out != "gone\n" {
		t.Errorf("the first command's background child after it ended: %q", out)
	}
}

// TestSandboxDeniedAndReaped: the policy's denial is a 403 with its
// decision; an idle sandbox is stopped by the reaper and its record
// says so.
func TestSandboxDeniedAndReaped(t *testing.T) {
	var log bytes.Buffer
	m, _ := newManager(t, Options{ReapEvery: 50 * time.Millisecond, DecisionLog: &log})
	ctx := context.Background()
	_, err := m.Create(ctx, Spec{Network: &Network{Allow: []string{"0.0.0.0/0:443"}}, Resources: map[string]any{"bandwidth": "10Mbit"}})
	var e *Error
	if !asError(err, &e) || e.Code != CodeDenied || e.Decision == "" || !strings.Contains(e.Message, "opens all egress") {
		t.Fatalf("open egress: %v", err)
	}
	_, err = m.Create(ctx, Spec{Resources: map[string]any{"memory": "lots"}})
	if CodeOf(err) != CodeBadRequest {
		t.Fatalf("bad spec: %v", err)
	}
	info, err := m.Create(ctx, Spec{IdleTimeout: Duration(300 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	// The server's decision log has both admissions, the denial first,
	// beside the action decisions on the creates.
	evs, err := policy.DecodeDecisionLog(bytes.NewReader(log.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var admissions []policy.DecisionEvent
	for _, ev := range evs {
		if ev.Path == policy.AdmissionPath {
			admissions = append(admissions, ev)
		}
	}
	if len(admissions) != 2 || admissions[0].DecisionID != e.Decision ||
		!strings.Contains(string(admissions[0].Result), `"allowed":false`) || !strings.Contains(string(admissions[1].Result), `"allowed":true`) ||
		admissions[1].RequestedBy != "sandbox:"+info.ID {
		t.Fatalf("admissions in the server's decision log: %+v", admissions)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		got, _ := m.Get(ctx, info.ID)
		if got.State == StateStopped {
			if got.Ended != "idle" || got.Record == "" {
				t.Fatalf("reaped: %+v", got)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("an idle sandbox was not stopped")
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

func asError(err error, e **Error) bool {
	if err == nil {
		return false
	}
	var x *Error
	ok := errors.As(err, &x)
	*e = x
	return ok
}

// TestSnapshotRestoreFork: the workspace stored as a NAR (the same tree
// gives the same id), a bad agent step rolled back, a fork that starts
// from the snapshot, a symlink and an executable kept as such, and a
// snapshot id this server never made refused.
func TestSnapshotRestoreFork(t *testing.T) {
	m, store := newManager(t, Options{})
	ctx := context.Background()
	info, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	collect(t, m, id, ExecRequest{Shell: "mkdir -p src && echo good > src/state.txt && printf '#!/bin/sh\\necho ran\\n' > run.sh && chmod +x run.sh && ln -s src/state.txt link"})
	snap, err := m.Snapshot(ctx, id, "good")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := m.Snapshot(ctx, id, "")
	if again.ID != snap.ID {
		t.Errorf("the same tree gave two ids: %s %s", snap.ID, again.ID)
	}
	collect(t, m, id, ExecRequest{Shell: "echo broken > src/state.txt; rm run.sh; mkdir junk; touch junk/x"})
	if _, err := m.Restore(ctx, id, snap.ID); err != nil {
		t.Fatal(err)
	}
	out, _, _ := collect(t, m, id, ExecRequest{Shell: "cat link; ./run.sh; ls; stat -c %U src/state.txt"})
	if out != "good\nran\nlink\nrun.sh\nsrc\nnobody\n" {
		t.Errorf("after restore: %q", out)
	}
	fork, err := m.Create(ctx, Spec{FromSnapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	out, _, _ = collect(t, m, fork.ID, ExecRequest{Shell: "cat src/state.txt"})
	if out != "good\n" {
		t.Errorf("fork: %q", out)
	}
	// A NAR in the store that no snapshot made is not a snapshot.
	h, _, err := store.PutNARFunc(func(w io.Writer) error { return nil })
	if err == nil {
		if _, err := m.Restore(ctx, id, h.Blob().String()); CodeOf(err) != CodeNotFound {
			t.Errorf("restore of a blob no snapshot made: %v", err)
		}
	}
	killed, err := m.Kill(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	rid, _ := store.Resolve(killed.Record)
	if p, err := store.Verify(rid); err != nil || len(p) != 0 {
		t.Errorf("verify: %v %v", p, err)
	}
	rec, _ := store.Get(rid)
	var kinds []string
	for _, e := range rec.Sandbox.Entries {
		kinds = append(kinds, e.Kind)
	}
	if strings.Join(kinds, ",") != "exec,snapshot,snapshot,exec,restore,exec" {
		t.Errorf("entries: %v", kinds)
	}
}

// TestActionPolicy: the policy's deny_action rules judge every action in a
// sandbox (reads only under data/, no curl), denials are 403s with their
// decision id, every decision is a line of the decision log, and a policy
// replaced on the running server applies to the next action.
func TestActionPolicy(t *testing.T) {
	var log bytes.Buffer
	m, store := newManager(t, Options{DecisionLog: &log})
	ctx := context.Background()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "actions.rego"), []byte(`package agentsandbox

deny_action contains msg if {
	input.action == "file_read"
	not startswith(input.path, "data/")
	msg := sprintf("%s: agents may read only under data/", [input.path])
}

deny_action contains msg if {
	input.action == "exec"
	input.command[0] == "curl"
	msg := "no curl here"
}
`), 0o644)
	strict, err := policy.Load(ctx, policy.Options{Dirs: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	collect(t, m, id, ExecRequest{Shell: "mkdir data; echo ok > data/a; echo secret > key"})
	m.(PolicySetter).SetPolicy(strict)

	var b bytes.Buffer
	if _, err := m.GetFile(ctx, id, "data/a", &b); err != nil || b.String() != "ok\n" {
		t.Errorf("allowed read: %q %v", b.String(), err)
	}
	_, err = m.GetFile(ctx, id, "key", &b)
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeDenied || e.Decision == "" || !strings.Contains(e.Message, "agents may read only under data/") {
		t.Errorf("denied read: %v", err)
	}
	if _, err := m.Exec(ctx, id, ExecRequest{Argv: []string{"curl", "x"}}, nil); CodeOf(err) != CodeDenied {
		t.Errorf("denied exec: %v", err)
	}
	evs, err := policy.DecodeDecisionLog(bytes.NewReader(log.Bytes()))
	if err != nil {
		t.Fatalf("decision log: %v\n%s", err, log.String())
	}
	var denied, admissions int
	instance := ""
	for _, ev := range evs {
		if ev.Path == policy.AdmissionPath { // the create's admission of its workflow
			admissions++
			if ev.RequestedBy != "sandbox:"+id || !strings.Contains(string(ev.Result), `"allowed":true`) {
				t.Errorf("admission line: %+v", ev)
			}
			continue
		}
		var in policy.Action
		var res struct {
			Allowed bool     `json:"allowed"`
			Deny    []string `json:"deny"`
		}
		if err := json.Unmarshal(ev.Input, &in); err != nil {
			t.Fatalf("decision %s input %s: %v", ev.DecisionID, ev.Input, err)
		}
		if err := json.Unmarshal(ev.Result, &res); err != nil {
			t.Fatalf("decision %s result %s: %v", ev.DecisionID, ev.Result, err)
		}
		if ev.Path != policy.ActionPath || ev.Custom["input_digest"] == nil || ev.BundleRevision() == "" || in.Sandbox.ID == "" && in.Action != "create" ||
			ev.Labels["type"] != "agentsandbox" || ev.Labels["version"] != "test" || ev.Labels["id"] == "" || ev.Metrics["timer_rego_query_eval_ns"] == nil {
			t.Errorf("decision line: %+v", ev)
		}
		if in.Sandbox.ID != "" && ev.RequestedBy != "sandbox:"+in.Sandbox.ID {
			t.Errorf("decision %s requested_by %q, want sandbox:%s", ev.DecisionID, ev.RequestedBy, in.Sandbox.ID)
		}
		if instance != "" && ev.Labels["id"] != instance {
			t.Errorf("labels.id %q then %q: one server, one instance id", instance, ev.Labels["id"])
		}
		instance = ev.Labels["id"]
		if !res.Allowed {
			denied++
		}
	}
	if denied != 2 {
		t.Errorf("%d denied decisions in the log, want 2:\n%s", denied, log.String())
	}
	if admissions != 1 {
		t.Errorf("%d admissions in the log, want the create's", admissions)
	}
	killed, _ := m.Kill(ctx, id)
	rid, _ := store.Resolve(killed.Record)
	rec, _ := store.Get(rid)
	for _, en := range rec.Sandbox.Entries {
		a, err := store.Action(en.Digest)
		if err != nil || a.Decision == "" {
			t.Errorf("entry %d (%s) names no decision: %+v %v", en.Seq, en.Kind, a, err)
		}
	}
}
