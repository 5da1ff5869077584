package sandboxes

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/internal/vmfixture"
	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/vmrunner/namespace"
	"github.com/agentsandbox/agentsandbox/vmrunner/vm"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// newVMManager is newManager with the vm backend beside the namespace one
// (vm tier): every VM step is realised as the test fixture's runner (the
// static agent as the initramfs's init, qemu under TCG).
func newVMManager(t *testing.T) (Manager, *record.Store, string) {
	t.Helper()
	fx, _ := vmfixture.ForTest(t, vmfixture.Options{})
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
	workDir := filepath.Join(dir, "vms")
	// A VM sandbox comes from a template that pins nixpkgs (the spec
	// alone cannot); the realiser here hands out the fixture's runner.
	templates := filepath.Join(dir, "templates")
	if err := os.MkdirAll(templates, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(templates, "vm.yaml"), []byte(vmTemplate), 0o644); err != nil {
		t.Fatal(err)
	}
	o := Options{
		TemplateDir: templates,
		Engine: engine.Options{
			Jobs: 1, Host: engine.Host{Root: true, Nix: true, QEMU: true}, Store: store,
			RunRoot: filepath.Join(store.Dir(), "runs"), HostStateDir: hostState,
			Backends: map[workflow.Isolation]vmrunner.Backend{
				workflow.IsolationNamespace: namespace.New(namespace.Options{StateDir: hostState, JailDir: filepath.Join(dir, "jails")}),
				workflow.IsolationVM:        vm.New(vm.Options{StateDir: hostState, WorkDir: workDir, Accel: "tcg"}),
			},
			Policy: pol, ToolVersion: "test",
		},
		Realiser: func(*workflow.Workflow, string) engine.RealiseFunc { return fx.Realise },
	}
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m, store, workDir
}

const vmTemplate = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: vm-template
nixpkgs: github:NixOS/nixpkgs/8fd9daa3db09ced9700431c5b7ad0e8ba199b575
steps:
  - name: box
    isolation: vm
    run: "true"
`

// TestVMSandboxLifecycle is TestSandboxLifecycle's core in a VM: a
// sandbox of isolation vm opened through the engine, commands many times
// over the session channel, stdin, a background command signalled, files
// put and read through the workspace share, a kill whose record verifies,
// and nothing left on the host.
func TestVMSandboxLifecycle(t *testing.T) {
	m, store, workDir := newVMManager(t)
	ctx := context.Background()
	before, _ := netns.List(netns.Prefix)
	info, err := m.Create(ctx, Spec{Template: "vm.yaml#box", Labels: map[string]string{"agent": "vm"}, Env: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if info.State != StateRunning || info.Isolation != "vm" {
		t.Fatalf("created: %+v", info)
	}
	id := info.ID
	for i := range 2 {
		out, _, x := collect(t, m, id, ExecRequest{Argv: []string{"echo", "hello"}})
		if out != "hello\n" || x.Exit == nil || x.Exit.ExitCode != 0 {
			t.Fatalf("echo %d: %q %+v", i, out, x)
		}
	}
	out, _, x := collect(t, m, id, ExecRequest{Shell: "echo $GREETING > state.txt; id -u; exit 3"})
	if strings.TrimSpace(out) != "65534" || x.Exit == nil || x.Exit.ExitCode != 3 {
		t.Fatalf("exec: out %q, info %+v", out, x)
	}
	stdin := "line one\nline two\n"
	out, _, _ = collect(t, m, id, ExecRequest{Argv: []string{"wc", "-l"}, Stdin: &stdin})
	if strings.TrimSpace(out) != "2" {
		t.Errorf("stdin: %q", out)
	}

	bg, err := m.Exec(ctx, id, ExecRequest{Shell: "trap 'echo got TERM; exit 9' TERM; echo ready; while :; do sleep 0.1; done", Background: true}, nil)
	if err != nil || bg.ID == "" {
		t.Fatalf("background: %+v %v", bg, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var seen strings.Builder
		m.Output(ctx, id, bg.ID, 0, 0, false, func(ev ExecEvent) error { seen.WriteString(ev.Text); return nil })
		if strings.Contains(seen.String(), "ready") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the background command did not start: %q", seen.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := m.Signal(ctx, id, bg.ID, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	var bgOut strings.Builder
	var exit *ExitStatus
	if err := m.Output(ctx, id, bg.ID, 0, 0, true, func(ev ExecEvent) error {
		bgOut.WriteString(ev.Text)
		if ev.Exit != nil {
			exit = ev.Exit
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if exit == nil || exit.ExitCode != 9 || !strings.Contains(bgOut.String(), "got TERM") {
		t.Errorf("signalled background command: %q, exit %+v", bgOut.String(), exit)
	}

	// The workspace is the VM's 9p share: the files API reads and writes
	// it on the host beneath its root, as for a jail.
	if _, err := m.PutFile(ctx, id, "data/in.csv", strings.NewReader("a,b\n1,2\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	out, _, _ = collect(t, m, id, ExecRequest{Shell: "cat data/in.csv | wc -l; cat state.txt > data/out.txt"})
	if strings.TrimSpace(out) != "2" {
		t.Errorf("the command does not see the put file: %q", out)
	}
	var got bytes.Buffer
	if _, err := m.GetFile(ctx, id, "data/out.txt", &got); err != nil || got.String() != "hi\n" {
		t.Errorf("get: %q %v", got.String(), err)
	}

	// A snapshot and a restore act on the same host directory: the
	// guest sees the restored tree through its share at once.
	snap, err := m.Snapshot(ctx, id, "before")
	if err != nil {
		t.Fatal(err)
	}
	collect(t, m, id, ExecRequest{Shell: "echo broken > state.txt; rm -r data; mkdir junk"})
	if _, err := m.Restore(ctx, id, snap.ID); err != nil {
		t.Fatal(err)
	}
	out, _, _ = collect(t, m, id, ExecRequest{Shell: "cat state.txt; ls"})
	if out != "hi\ndata\nstate.txt\n" {
		t.Errorf("after restore, the guest sees %q", out)
	}

	killed, err := m.Kill(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if killed.State != StateStopped || killed.Record == "" {
		t.Fatalf("killed: %+v", killed)
	}
	rid, err := store.Resolve(killed.Record)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := store.Get(rid)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Sandbox == nil || rec.Sandbox.Ended != "killed" || len(rec.Steps) != 1 || rec.Steps[0].Isolation != "vm" {
		t.Fatalf("record: %+v %+v", rec.Sandbox, rec.Steps)
	}
	if p, err := store.Verify(rid); err != nil || len(p) != 0 {
		t.Errorf("verify: %v %v", p, err)
	}

	// Nothing left: netns, cgroups, the VM's working directory with its
	// sockets, the sandbox's directories, the qemu process.
	after, _ := netns.List(netns.Prefix)
	for _, n := range after {
		if !contains(before, n) && strings.Contains(n, id[:8]) {
			t.Errorf("namespace left: %s", n)
		}
	}
	groups, err := cgroup.List(hoststate.CgroupRoot)
	if err != nil {
		t.Errorf("list cgroups: %v", err)
	}
	for _, g := range groups {
		if strings.HasPrefix(g, hoststate.RunCgroup(id)+"/") || g == hoststate.RunCgroup(id) {
			t.Errorf("cgroup %s left", g)
		}
	}
	if entries, _ := os.ReadDir(workDir); len(entries) != 0 {
		t.Errorf("VM working directories left: %v", entries)
	}
	if entries, _ := os.ReadDir(filepath.Join(store.Dir(), "runs")); len(entries) != 0 {
		t.Errorf("sandbox directories left: %v", entries)
	}
	// qemu runs in the VM's working directory.
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		if cwd, err := os.Readlink(filepath.Join(p, "cwd")); err == nil && strings.HasPrefix(cwd, workDir) {
			cmd, _ := os.ReadFile(filepath.Join(p, "cmdline"))
			t.Errorf("a process of the sandbox is left: %s in %s: %q", p, cwd, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}))
		}
	}
}
