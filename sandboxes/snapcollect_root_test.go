package sandboxes

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/record"
)

// blobBytes is the bytes the store's blobs take.
func blobBytes(t *testing.T, store *record.Store) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(filepath.Join(store.Dir(), "blobs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// TestSnapshotQuotas: a snapshot's NAR costs every byte of every file,
// holes of a sparse file too, so a sandbox's snapshots are bounded in
// bytes (a second snapshot of a changed 128 MiB sparse file is refused
// before anything is stored) and in number (distinct trees; the same tree
// again is no new one), and so are those of every running sandbox
// together.
func TestSnapshotQuotas(t *testing.T) {
	m, store := newManager(t, Options{MaxSnapshots: 3, MaxSnapshotBytes: 200 << 20, SnapshotStoreBytes: 300 << 20})
	ctx := context.Background()
	info, err := m.Create(ctx, Spec{Resources: map[string]any{"disk": "512MiB"}})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	collect(t, m, id, ExecRequest{Shell: "truncate -s 128M sparse && du -k sparse"})
	first, err := m.Snapshot(ctx, id, "sparse")
	if err != nil {
		t.Fatal(err)
	}
	if first.Size < 128<<20 {
		t.Fatalf("the NAR of a 128 MiB sparse file: %d bytes", first.Size)
	}
	collect(t, m, id, ExecRequest{Shell: "printf x | dd of=sparse conv=notrunc 2>/dev/null"})
	before := blobBytes(t, store)
	_, err = m.Snapshot(ctx, id, "changed")
	if CodeOf(err) != CodeTooLarge || !strings.Contains(err.Error(), "--max-snapshot-bytes") || !strings.Contains(err.Error(), "nothing was stored") {
		t.Fatalf("a second 128 MiB snapshot under a 200 MiB quota: %v (code %s)", err, CodeOf(err))
	}
	if after := blobBytes(t, store); after > before+1<<20 {
		t.Errorf("the refused snapshot stored %d bytes", after-before)
	}
	collect(t, m, id, ExecRequest{Shell: "rm sparse; echo 1 > small"})
	one, err := m.Snapshot(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	// The same tree again is the same snapshot, and counts once.
	if again, err := m.Snapshot(ctx, id, ""); err != nil || again.ID != one.ID {
		t.Fatalf("the same tree again: %+v %v", again, err)
	}
	collect(t, m, id, ExecRequest{Shell: "echo 2 > small"})
	if _, err := m.Snapshot(ctx, id, ""); err != nil {
		t.Fatalf("a third distinct tree under a quota of 3: %v", err)
	}
	collect(t, m, id, ExecRequest{Shell: "echo 3 > small"})
	if _, err := m.Snapshot(ctx, id, ""); CodeOf(err) != CodeLimit || !strings.Contains(err.Error(), "--max-snapshots") {
		t.Errorf("a fourth distinct tree under a quota of 3: %v (code %s)", err, CodeOf(err))
	}
	// The server's total: another sandbox's 128 MiB passes 300 MiB with
	// the first one's 128 MiB.
	other, err := m.Create(ctx, Spec{Resources: map[string]any{"disk": "512MiB"}})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, m, other.ID, ExecRequest{Shell: "truncate -s 100M a && truncate -s 100M b"})
	if _, err := m.Snapshot(ctx, other.ID, ""); CodeOf(err) != CodeTooLarge || !strings.Contains(err.Error(), "--snapshot-store-bytes") {
		t.Errorf("a 200 MiB snapshot beside 128 MiB under a 300 MiB server total: %v (code %s)", err, CodeOf(err))
	}
}

// TestSnapshotCollection: a snapshot lasts as long as its sandbox (and
// any other running sandbox that took the same tree); then its ref and
// tree go, the record still verifies and names it, and a fork from it is
// a 404. A tree whose blob something else keeps (a file another sandbox
// put with the very bytes of the NAR) loses its ref but not its blob, so
// that sandbox's record still verifies. agentsandbox gc collects what
// a server left, and leaves the snapshots of running sandboxes alone.
func TestSnapshotCollection(t *testing.T) {
	m, store := newManager(t, Options{})
	mm := m.(*manager)
	ctx := context.Background()
	create := func() string {
		info, err := m.Create(ctx, Spec{})
		if err != nil {
			t.Fatal(err)
		}
		return info.ID
	}
	a, b, c := create(), create(), create()
	collect(t, m, a, ExecRequest{Shell: "echo shared > f"})
	collect(t, m, b, ExecRequest{Shell: "echo shared > f"})
	shared, err := m.Snapshot(ctx, a, "")
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := m.Snapshot(ctx, b, ""); s.ID != shared.ID {
		t.Fatalf("the same tree in two sandboxes: %s %s", s.ID, shared.ID)
	}
	collect(t, m, a, ExecRequest{Shell: "echo mine > f"})
	own, err := m.Snapshot(ctx, a, "")
	if err != nil {
		t.Fatal(err)
	}
	ownD, _ := record.ParseDigest(own.ID)
	sharedD, _ := record.ParseDigest(shared.ID)
	// c puts a file whose bytes are own's NAR: the blob is its record's too.
	nar, err := store.OpenBlob(ownD)
	if err != nil {
		t.Fatal(err)
	}
	narBytes, _ := io.ReadAll(nar)
	nar.Close()
	if _, err := m.PutFile(ctx, c, "copy.nar", bytes.NewReader(narBytes), 0); err != nil {
		t.Fatal(err)
	}
	// Another tree, a's alone, to see go.
	collect(t, m, a, ExecRequest{Shell: "echo gone > f"})
	gone, err := m.Snapshot(ctx, a, "")
	if err != nil {
		t.Fatal(err)
	}
	goneD, _ := record.ParseDigest(gone.ID)

	// b restores a's tree: that does not make it b's (it has it already).
	if _, err := m.Restore(ctx, b, gone.ID); err != nil {
		t.Fatal(err)
	}
	// gc while they run: nothing goes (the journals hold them).
	if removed, err := CollectSnapshots(store); err != nil || len(removed) != 0 {
		t.Fatalf("gc while the sandboxes run: %v %v", removed, err)
	}
	cRec, err := m.Kill(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	aRec, err := m.Kill(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mm.collectPending(); err != nil {
		t.Fatal(err)
	}
	if store.HasBlob(goneD) {
		t.Error("the tree only the killed sandbox took (another restored it) is still stored")
	}
	if _, err := m.Create(ctx, Spec{FromSnapshot: gone.ID}); CodeOf(err) != CodeNotFound {
		t.Errorf("a fork from a collected snapshot: %v, want not found", err)
	}
	if !store.HasBlob(ownD) {
		t.Error("a tree whose blob another record keeps was removed")
	}
	if _, err := m.Create(ctx, Spec{FromSnapshot: own.ID}); CodeOf(err) != CodeNotFound {
		t.Errorf("a fork from a collected snapshot whose blob is kept: %v, want not found", err)
	}
	// b took the shared tree too: it can still restore it.
	if _, err := m.Restore(ctx, b, shared.ID); err != nil {
		t.Errorf("restore of a tree another running sandbox holds: %v", err)
	}
	for _, rec := range []string{aRec.Record, cRec.Record} {
		rid, _ := store.Resolve(rec)
		if p, err := store.Verify(rid); err != nil || len(p) != 0 {
			t.Errorf("verify %s after the collection: %v %v", rec, p, err)
		}
	}
	rid, _ := store.Resolve(aRec.Record)
	r, _ := store.Get(rid)
	var names bool
	for _, e := range r.Sandbox.Entries {
		if act, err := store.Action(e.Digest); err == nil && e.Kind == "snapshot" && act.File != nil && *act.File == goneD {
			names = true
		}
	}
	if !names {
		t.Error("the record does not name the collected snapshot")
	}
	// A server killed before it collected: its refs are left; gc takes
	// them once no journal holds them.
	if err := store.PutRef(snapshotRef, sharedD.Hex(), sharedD); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Kill(ctx, b); err != nil {
		t.Fatal(err)
	}
	if removed, err := CollectSnapshots(store); err != nil || len(removed) != 1 || store.HasBlob(sharedD) {
		t.Errorf("gc after every sandbox stopped: %v %v", removed, err)
	}
	if keys, _ := store.RefKeys(snapshotRef); len(keys) != 0 {
		t.Errorf("snapshot refs left: %v", keys)
	}
	// A tree being forked from when its sandbox stops is passed over, and
	// collected once the fork is done.
	d := create()
	collect(t, m, d, ExecRequest{Shell: "echo forked > f"})
	snap, err := m.Snapshot(ctx, d, "")
	if err != nil {
		t.Fatal(err)
	}
	snapD, _ := record.ParseDigest(snap.ID)
	release := mm.holdTree(snap.ID) // a fork under way
	if _, err := m.Kill(ctx, d); err != nil {
		t.Fatal(err)
	}
	mm.collectPending()
	if !store.HasBlob(snapD) {
		t.Fatal("a tree was collected while a fork read it")
	}
	release()
	mm.collectPending()
	if store.HasBlob(snapD) {
		t.Error("a tree passed over while it was forked from is still stored after the fork")
	}
}
