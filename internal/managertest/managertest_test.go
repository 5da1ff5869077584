package managertest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// TestManager: the real manager on the fake backend creates a sandbox
// whose commands run in the directory Dir names, lists it for its owner
// only, kills it into a record, and counts its closes.
func TestManager(t *testing.T) {
	m := New(t, sandboxes.Options{MaxSandboxes: 1})
	ctx := sandboxes.WithIdentity(context.Background(), sandboxes.Identity{Name: "a"})
	info, err := m.Create(ctx, sandboxes.Spec{Env: map[string]string{"X": "42"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, sandboxes.Spec{}); sandboxes.CodeOf(err) != sandboxes.CodeLimit {
		t.Errorf("a create past MaxSandboxes: %v, want limit_exceeded", err)
	}
	var out strings.Builder
	x, err := m.Exec(ctx, info.ID, sandboxes.ExecRequest{Shell: "echo $X > x.txt; id -u"}, func(ev sandboxes.ExecEvent) error {
		if ev.Type == sandboxes.EventStdout {
			out.WriteString(ev.Text)
		}
		return nil
	})
	if err != nil || x.Exit == nil || x.Exit.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", x, err)
	}
	if want := os.Geteuid(); strings.TrimSpace(out.String()) != strconv.Itoa(want) {
		t.Errorf("the command ran as uid %q, want the caller's %d", out.String(), want)
	}
	dir := m.Dir(ctx, info.ID)
	if b, err := os.ReadFile(filepath.Join(dir, "x.txt")); err != nil || string(b) != "42\n" {
		t.Errorf("Dir %q holds x.txt %q %v, want what the command wrote", dir, b, err)
	}
	if l, _ := m.List(sandboxes.WithIdentity(context.Background(), sandboxes.Identity{Name: "b"}), nil); len(l) != 0 {
		t.Errorf("another identity lists %+v", l)
	}
	if k, err := m.Kill(ctx, info.ID); err != nil || k.Record == "" {
		t.Errorf("kill: %+v %v, want a record", k, err)
	}
	if m.Dir(ctx, info.ID) != "" {
		t.Error("Dir of a killed sandbox is not empty")
	}
	if err := m.Close(context.Background()); err != nil || m.Closed() != 1 {
		t.Errorf("close: %v, closed %d times", err, m.Closed())
	}
}
