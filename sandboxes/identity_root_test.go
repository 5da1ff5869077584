package sandboxes

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/record"
)

// TestOwnership: the real manager, called for two identities and an
// admin: another's sandbox, exec and snapshot are not found, with the
// message of an id nobody has; lists are the caller's; the record of a
// killed sandbox, and the journal of a running one, name the owner; the
// blobs an identity owns are its records' and its running sandboxes'
// entries'; an identity's MaxSandboxes and MaxRuns are its own.
func TestOwnership(t *testing.T) {
	m, store := newManager(t, Options{})
	bg := context.Background()
	a := WithIdentity(bg, Identity{Name: "a", MaxSandboxes: 2, MaxRuns: 1})
	b := WithIdentity(bg, Identity{Name: "b"})
	admin := WithIdentity(bg, Identity{Name: "ops", Admin: true})

	sbA, err := m.Create(a, Spec{Labels: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if sbA.Owner != "a" {
		t.Errorf("a's sandbox: owner %q", sbA.Owner)
	}
	put, err := m.PutFile(a, sbA.ID, "secret.txt", strings.NewReader("A's secret\n"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	x, err := m.Exec(a, sbA.ID, ExecRequest{Argv: []string{"true"}}, func(ExecEvent) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	snap, err := m.Snapshot(a, sbA.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	sbB, err := m.Create(b, Spec{})
	if err != nil {
		t.Fatal(err)
	}

	// b: a's things are not there, in the words of things nobody has.
	const ghost = "0123456789abcdef"
	same := func(what string, err, ghostErr error) {
		t.Helper()
		if CodeOf(err) != CodeNotFound || err == nil || ghostErr == nil ||
			strings.ReplaceAll(err.Error(), sbA.ID, ghost) != ghostErr.Error() {
			t.Errorf("b's %s of a's sandbox: %v (of an unknown one: %v), want the same not_found", what, err, ghostErr)
		}
	}
	for _, c := range []struct {
		what string
		call func(id string) error
	}{
		{"get", func(id string) error { _, err := m.Get(b, id); return err }},
		{"extend", func(id string) error { _, err := m.Extend(b, id, 0, 0); return err }},
		{"exec", func(id string) error {
			_, err := m.Exec(b, id, ExecRequest{Argv: []string{"cat", "secret.txt"}}, func(ExecEvent) error { return nil })
			return err
		}},
		{"get exec", func(id string) error { _, err := m.GetExec(b, id, x.ID); return err }},
		{"output", func(id string) error {
			return m.Output(b, id, x.ID, 0, 0, false, func(ExecEvent) error { return nil })
		}},
		{"signal", func(id string) error { return m.Signal(b, id, x.ID, "SIGKILL") }},
		{"get file", func(id string) error { _, err := m.GetFile(b, id, "secret.txt", &strings.Builder{}); return err }},
		{"put file", func(id string) error {
			_, err := m.PutFile(b, id, "secret.txt", strings.NewReader("b"), 0o644)
			return err
		}},
		{"stat", func(id string) error { _, err := m.Stat(b, id, "secret.txt"); return err }},
		{"ls", func(id string) error { _, err := m.ListFiles(b, id, "."); return err }},
		{"remove", func(id string) error { return m.RemoveFile(b, id, "secret.txt", false) }},
		{"snapshot", func(id string) error { _, err := m.Snapshot(b, id, ""); return err }},
		{"snapshots", func(id string) error { _, err := m.Snapshots(b, id); return err }},
		{"restore", func(id string) error { _, err := m.Restore(b, id, snap.ID); return err }},
		{"network", func(id string) error { _, err := m.(NetworkManager).Network(b, id); return err }},
		{"kill", func(id string) error { _, err := m.Kill(b, id); return err }},
	} {
		same(c.what, c.call(sbA.ID), c.call(ghost))
	}
	ghostSnap := "sha256:" + strings.Repeat("0", 64)
	_, err = m.Restore(b, sbB.ID, snap.ID)
	_, gerr := m.Restore(b, sbB.ID, ghostSnap)
	if CodeOf(err) != CodeNotFound || strings.ReplaceAll(err.Error(), snap.ID, ghostSnap) != gerr.Error() {
		t.Errorf("b restores a's snapshot into its own sandbox: %v (an unknown one: %v)", err, gerr)
	}
	if _, err := m.Create(b, Spec{FromSnapshot: snap.ID}); CodeOf(err) != CodeNotFound {
		t.Errorf("b forks from a's snapshot: %v", err)
	}
	if l, _ := m.List(b, map[string]string{"team": "a"}); len(l) != 0 {
		t.Errorf("b lists a's sandbox by its label: %+v", l)
	}
	if l, _ := m.List(b, nil); len(l) != 1 || l[0].ID != sbB.ID {
		t.Errorf("b lists %+v", l)
	}
	if l, _ := m.List(admin, nil); len(l) != 2 {
		t.Errorf("the admin lists %d sandboxes, want 2", len(l))
	}
	if f, err := m.Create(admin, Spec{FromSnapshot: snap.ID}); err != nil || f.Owner != "ops" {
		t.Errorf("the admin forks from a's snapshot: %+v %v", f, err)
	}
	// The contexts of the operator's own process see everything too.
	if _, err := m.Get(bg, sbA.ID); err != nil {
		t.Errorf("the operator gets a's sandbox: %v", err)
	}

	// The journal of a's running sandbox names its owner.
	if j, err := os.ReadFile(m.(*manager).journalPath(sbA.ID)); err != nil || !strings.Contains(strings.SplitN(string(j), "\n", 2)[0], `"owner":"a"`) {
		t.Errorf("a's journal's draft does not name its owner: %v\n%.300s", err, j)
	}
	// What a owns: its running sandbox's entries' blobs, not b's.
	mgr := m.(*manager)
	ownsA, ownsB := mgr.owned(Identity{Name: "a"}), mgr.owned(Identity{Name: "b"})
	fileDigest, err := record.ParseDigest("sha256:" + put.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	if !ownsA(fileDigest) || ownsB(fileDigest) {
		t.Errorf("a's file blob: a owns it %v, b %v; want a only", ownsA(fileDigest), ownsB(fileDigest))
	}

	// Limits: a holds one sandbox of its two.
	if _, err := m.Create(a, Spec{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(a, Spec{}); CodeOf(err) != CodeLimit || !strings.Contains(err.Error(), "max_sandboxes 2") {
		t.Errorf("a's third sandbox: %v, want limit_exceeded naming max_sandboxes", err)
	}
	if _, err := m.Create(b, Spec{}); err != nil {
		t.Errorf("b's second sandbox while a is at its limit: %v", err)
	}

	// The killed sandbox's record is a's.
	killed, err := m.Kill(a, sbA.ID)
	if err != nil {
		t.Fatal(err)
	}
	id, err := record.ParseID(killed.Record)
	if err != nil {
		t.Fatal(err)
	}
	r, err := store.Get(id)
	if err != nil || r.Owner != "a" {
		t.Errorf("a's record: owner %q, %v", r.Owner, err)
	}
	// Once closed, its record's blobs are still a's only.
	ownsA, ownsB = mgr.owned(Identity{Name: "a"}), mgr.owned(Identity{Name: "b"})
	if !ownsA(fileDigest) || ownsB(fileDigest) || !ownsA(r.Workflow.FileDigest) {
		t.Errorf("a's record's blobs: a owns the file %v and the workflow %v, b the file %v", ownsA(fileDigest), ownsA(r.Workflow.FileDigest), ownsB(fileDigest))
	}
	if !mgr.owned(Identity{Name: "ops", Admin: true})(fileDigest) {
		t.Error("the admin does not own a's file blob")
	}
}
