package sandboxes

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/record"
)

// TestJournalRecovery: the journal of a sandbox whose server died (here:
// the journal as it was before a clean kill, put back, with a torn last
// line as a crash mid-write leaves) is closed into a record by the next
// manager: the draft's step, every whole entry, "server killed"; then
// the journal is gone.
func TestJournalRecovery(t *testing.T) {
	m, store := newManager(t, Options{})
	ctx := context.Background()
	info, err := m.Create(ctx, Spec{Labels: map[string]string{"task": "j"}})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, m, info.ID, ExecRequest{Shell: "echo one"})
	if _, err := m.PutFile(ctx, info.ID, "a.txt", strings.NewReader("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := m.(*manager).journalPath(info.ID)
	// The exec's entry is appended once its output is stored.
	var saved []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if saved, err = os.ReadFile(p); err != nil {
			t.Fatalf("the running sandbox's journal: %v", err)
		}
		if strings.Count(string(saved), "\n") == 3 {
			break
		}
	}
	if n := strings.Count(string(saved), "\n"); n != 3 {
		t.Fatalf("journal of %d lines, want the draft and 2 entries:\n%s", n, saved)
	}
	if _, err := m.Kill(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("the journal outlived the record: %v", err)
	}
	os.WriteFile(p, append(saved, []byte(`{"seq":3,"ti`)...), 0o600)

	m2, err := New(m.(*manager).o)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close(ctx)
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("the journal was not removed after recovery: %v", err)
	}
	list, err := store.List()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, s := range list {
		r, err := store.Get(s.ID)
		if err != nil || r.Sandbox == nil || r.Sandbox.Ended != "server killed" {
			continue
		}
		found = true
		// The exec's entry is written when its output is stored, so it
		// may come before or after the put's.
		kinds := map[string]bool{}
		for _, e := range r.Sandbox.Entries {
			kinds[e.Kind] = true
		}
		if r.Sandbox.ID != info.ID || len(r.Sandbox.Entries) != 2 || !kinds["exec"] || !kinds["file_put"] ||
			r.Sandbox.Labels["task"] != "j" || r.Status != record.StatusError {
			t.Errorf("recovered record: %+v, status %s", r.Sandbox, r.Status)
		}
		if r.Policy == nil || r.Policy.DecisionLog == nil {
			t.Errorf("the sandbox's record names no decision log: %+v", r.Policy)
		}
		if problems, err := store.Verify(s.ID); err != nil || len(problems) > 0 {
			t.Errorf("verify: %v %v", problems, err)
		}
	}
	if !found {
		t.Error("no record was closed from the journal")
	}
}
