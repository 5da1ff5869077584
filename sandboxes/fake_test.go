package sandboxes

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/internal/fakebackend"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// TestManagerOnFakeBackend: the real manager, on the fake backend's
// sessions, without root: a sandbox opened through the engine runs
// commands that keep state between them, reads a file put in its
// workspace, and is killed into a record.
func TestManagerOnFakeBackend(t *testing.T) {
	m, fake := onFakeBackend(t)
	ctx := context.Background()
	info, err := m.Create(ctx, Spec{Resources: map[string]any{"timeout": "1m"}, Env: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if info.State != StateRunning {
		t.Fatalf("created %+v", info)
	}
	if runs := fake.Runs(); len(runs) != 1 || !runs[0].Job.Session {
		t.Fatalf("the fake opened %+v, want one session job", runs)
	}
	run := func(argv ...string) (string, ExecInfo) {
		t.Helper()
		var out strings.Builder
		x, err := m.Exec(ctx, info.ID, ExecRequest{Argv: argv}, func(ev ExecEvent) error {
			if ev.Type == EventStdout {
				out.WriteString(ev.Text)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out.String(), x
	}
	if out, x := run("sh", "-c", "echo $GREETING > kept.txt; echo made"); out != "made\n" || x.Exit == nil || x.Exit.ExitCode != 0 {
		t.Fatalf("first exec: %q %+v", out, x)
	}
	if out, _ := run("cat", "kept.txt"); out != "hi\n" {
		t.Errorf("second exec read %q, want what the first left in the workspace", out)
	}
	if _, err := m.PutFile(ctx, info.ID, "put.txt", bytes.NewReader([]byte("from the host\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _ := run("cat", "put.txt"); out != "from the host\n" {
		t.Errorf("the sandbox read %q from a put file", out)
	}
	if out, x := run("sh", "-c", "exit 4"); out != "" || x.Exit == nil || x.Exit.ExitCode != 4 {
		t.Errorf("failing exec: %q %+v", out, x)
	}
	killed, err := m.Kill(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if killed.State == StateRunning {
		t.Errorf("killed sandbox still %s", killed.State)
	}
}

// onFakeBackend is the real manager on the fake backend, closed when the
// test ends.
func onFakeBackend(t *testing.T) (Manager, *fakebackend.Backend) {
	t.Helper()
	dir := t.TempDir()
	store, err := record.OpenStore(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(context.Background(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := fakebackend.New()
	m, err := New(Options{Engine: engine.Options{
		Jobs: 1, Store: store, RunRoot: filepath.Join(store.Dir(), "runs"), HostStateDir: filepath.Join(dir, "host-state"),
		Backends:    map[workflow.Isolation]vmrunner.Backend{workflow.IsolationNamespace: fake},
		Policy:      pol,
		ToolVersion: "test",
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m, fake
}

// TestStoppedKeepsOwner: a killed sandbox is still its owner's to see
// (stopped, with its record) and still no one else's.
func TestStoppedKeepsOwner(t *testing.T) {
	m, _ := onFakeBackend(t)
	a := WithIdentity(context.Background(), Identity{Name: "a"})
	b := WithIdentity(context.Background(), Identity{Name: "b"})
	info, err := m.Create(a, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Kill(a, info.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Get(a, info.ID); err != nil || got.State == StateRunning {
		t.Errorf("the owner's Get of its killed sandbox: %+v %v", got, err)
	}
	if l, _ := m.List(a, nil); len(l) != 1 || l[0].ID != info.ID {
		t.Errorf("the owner lists %+v after the kill, want its stopped sandbox", l)
	}
	if l, _ := m.List(b, nil); len(l) != 0 {
		t.Errorf("another identity lists %+v", l)
	}
	if _, err := m.Get(b, info.ID); CodeOf(err) != CodeNotFound {
		t.Errorf("another identity's Get: %v, want not_found", err)
	}
}
