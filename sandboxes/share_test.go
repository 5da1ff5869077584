package sandboxes_test

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// TestRecordsPushedToRemote: with a shared store, the record a sandbox's
// kill writes reaches it with every blob it names (the exec's output
// among them) by the time Close returns, and another machine's store
// pulls it whole from there.
func TestRecordsPushedToRemote(t *testing.T) {
	rm, err := record.OpenDirRemote(filepath.Join(t.TempDir(), "shared"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := managertest.Open(t.TempDir(), sandboxes.Options{Remote: rm})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	info, err := m.Create(ctx, sandboxes.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Exec(ctx, info.ID, sandboxes.ExecRequest{Shell: "echo pushed"}, nil); err != nil {
		t.Fatal(err)
	}
	killed, err := m.Kill(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	id, err := record.ParseID(killed.Record)
	if err != nil {
		t.Fatalf("the kill gave no record: %+v (%v)", killed, err)
	}
	if ok, err := rm.Has(ctx, record.RecordKey(id)); err != nil || !ok {
		t.Fatalf("record %s is not in the shared store (%v)", id, err)
	}
	other, err := record.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := record.Pull(ctx, other, rm, id); err != nil {
		t.Fatalf("another store pulls it: %v", err)
	}
	rec, err := other.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Sandbox == nil {
		t.Fatal("the pulled record is not a sandbox's")
	}
	var stdout *record.Digest
	for _, e := range rec.Sandbox.Entries {
		if e.Kind != "exec" {
			continue
		}
		a, err := other.Action(e.Digest)
		if err != nil {
			t.Fatalf("the exec's entry in the other store: %v", err)
		}
		stdout = a.Stdout
	}
	if stdout == nil {
		t.Fatal("the pulled record has no exec with its stdout")
	}
	f, err := other.OpenBlob(*stdout)
	if err != nil {
		t.Fatalf("the exec's stdout in the other store: %v", err)
	}
	defer f.Close()
	if b, _ := io.ReadAll(f); string(b) != "pushed\n" {
		t.Errorf("the exec's stdout in the other store: %q", b)
	}
}
