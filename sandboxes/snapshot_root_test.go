package sandboxes

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	nt "github.com/agentsandbox/agentsandbox/internal/nartest"
)

// TestSnapshotRestoreNeverFollowsASymlink: a snapshot holding a symlink
// out of the workspace is restored with the symlink as a symlink, over a
// workspace where the job planted another one; a snapshot whose NAR is not
// a well-formed tree (a store received from elsewhere: a symlink out, then
// a directory of the same name) is refused by restore and by a fork, the
// workspace left as it was and nothing written outside.
func TestSnapshotRestoreNeverFollowsASymlink(t *testing.T) {
	m, store := newManager(t, Options{})
	ctx := context.Background()
	outside := t.TempDir()
	info, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	collect(t, m, id, ExecRequest{Shell: "mkdir d && echo kept > d/file && ln -s " + outside + " out"})
	snap, err := m.Snapshot(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	// The job swaps d for a symlink out: restore must replace the link,
	// not write d/file through it.
	collect(t, m, id, ExecRequest{Shell: "rm -rf d && ln -s " + outside + " d"})
	if _, err := m.Restore(ctx, id, snap.ID); err != nil {
		t.Fatal(err)
	}
	out, _, _ := collect(t, m, id, ExecRequest{Shell: "cat d/file; readlink out"})
	if out != "kept\n"+outside+"\n" {
		t.Errorf("after restore: %q", out)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("restore wrote outside: %v", entries)
	}

	forged := nt.Dir(nt.E("x", nt.Symlink(outside)), nt.E("x", nt.Dir(nt.E("file", nt.File("pwned")))))
	d, _, err := store.PutBlob(bytes.NewReader(forged.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	hexd := strings.TrimPrefix(d.String(), "sha256:")
	if err := store.PutRef(snapshotRef, hexd, d); err != nil {
		t.Fatal(err)
	}
	_, err = m.Restore(ctx, id, d.String())
	if err == nil || !strings.Contains(err.Error(), `entry "/x" repeats`) {
		t.Errorf("restore of a forged snapshot: %v", err)
	}
	out, _, _ = collect(t, m, id, ExecRequest{Shell: "ls"})
	if out != "d\nout\n" {
		t.Errorf("a refused restore changed the workspace: %q", out)
	}
	if _, err := m.Create(ctx, Spec{FromSnapshot: d.String()}); err == nil || !strings.Contains(err.Error(), `entry "/x" repeats`) {
		t.Errorf("fork from a forged snapshot: %v", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("restore wrote outside: %v", entries)
	}
	// Nor did the scratch trees stay behind in the run directory.
	scratch, _ := filepath.Glob(filepath.Join(store.Dir(), "runs", "*", "scratch-*"))
	if len(scratch) != 0 {
		t.Errorf("scratch directories left: %v", scratch)
	}
}
