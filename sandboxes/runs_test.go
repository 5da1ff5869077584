package sandboxes

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
)

// pureManager is a manager that opens no sandbox (no backends): enough
// for what is decided before a run or a create opens anything.
func pureManager(t *testing.T, o Options) *manager {
	t.Helper()
	store, err := record.OpenStore(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(context.Background(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o.Engine = engine.Options{Store: store, Policy: pol}
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m.(*manager)
}

// TestRunLimitBeforeParse: a server running MaxRuns workflows refuses
// the next before it parses it: a request that does not even parse gets
// the limit, not a parse error (the limit used to be checked after the
// parse, so a full server still paid for every request's YAML).
func TestRunLimitBeforeParse(t *testing.T) {
	m := pureManager(t, Options{MaxRuns: 1})
	bomb, err := os.ReadFile("../workflow/testdata/bad/alias-bomb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	m.runs = 1 // a run holds the one place
	m.mu.Unlock()
	for _, inline := range []string{"steps: [unclosed", string(bomb)} {
		_, err := m.Run(context.Background(), RunRequest{Inline: inline})
		if CodeOf(err) != CodeLimit || !strings.Contains(err.Error(), "already runs 1 workflows") {
			t.Errorf("a full server, inline %.20q: %v, want %s", inline, err, CodeLimit)
		}
	}
	m.mu.Lock()
	m.runs = 0
	m.mu.Unlock()
	// With a place free, the bomb is refused at its position, at once,
	// and gives the place back.
	start := time.Now()
	_, err = m.Run(context.Background(), RunRequest{Inline: string(bomb)})
	if took := time.Since(start); took > time.Second {
		t.Errorf("refusing the alias bomb took %v", took)
	}
	if CodeOf(err) != CodeBadRequest || !strings.Contains(err.Error(), "inline-workflow.yaml:10:32: with this alias *m4") {
		t.Errorf("the alias bomb: %v", err)
	}
	// A caller that has gone is not run.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = m.Run(ctx, RunRequest{Inline: "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: w\nsteps: [{name: a, run: echo}]\n"})
	if err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Errorf("a cancelled run: %v", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runs != 0 {
		t.Errorf("runs %d after refusals, want 0", m.runs)
	}
}

// TestCreateLimitBeforeParse: a server whose MaxSandboxes places are all
// held, with no warm sandbox ready to serve the create, refuses it before
// it parses the spec or reads its template.
func TestCreateLimitBeforeParse(t *testing.T) {
	m := pureManager(t, Options{MaxSandboxes: 1})
	m.mu.Lock()
	m.boxes["held"] = &box{m: m, id: "held"} // being created: holds its place
	m.mu.Unlock()
	for _, s := range []Spec{{Resources: map[string]any{"memory": "lots"}}, {Template: "no-such.yaml#x"}} {
		if _, err := m.Create(context.Background(), s); CodeOf(err) != CodeLimit || !strings.Contains(err.Error(), "holds 1 sandboxes (1 running, 0 warm)") {
			t.Errorf("create %+v on a full server: %v, want %s", s, err, CodeLimit)
		}
	}
}
