package record

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
	"time"
)

// TestSnapshotTreesAreNotKept: a sandbox record's snapshot and restore
// entries name their tree but do not keep it (KeptMark leaves it out,
// and verify passes once it is collected, yet still finds it tampered
// while present); every other blob an entry names is kept and checked,
// and so is what a ref that is not a snapshot's names.
func TestSnapshotTreesAreNotKept(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	put := func(b []byte) Digest {
		d, _, err := s.PutBlob(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	tree, file, gitTree := put([]byte("a tree")), put([]byte("a file")), put([]byte("a git tree"))
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var entries []Entry
	for i, a := range []Action{
		{Kind: "snapshot", Time: at, File: &tree, Size: 6},
		{Kind: "restore", Time: at, File: &tree},
		{Kind: "file_put", Time: at, Path: "f", File: &file, Size: 6},
	} {
		b, _ := json.Marshal(a)
		entries = append(entries, Entry{Seq: i + 1, Time: at, Kind: a.Kind, Digest: put(b), Summary: a.Kind})
	}
	id, err := s.Put(&Record{Version: Version, Started: at, Finished: at, Status: StatusSucceeded,
		Sandbox: &Sandbox{ID: "sb1", Ended: "killed", Entries: entries}})
	if err != nil {
		t.Fatal(err)
	}
	for kind, d := range map[string]Digest{"snapshot": tree, "snapshot.alice": tree, "git": gitTree} {
		if err := s.PutRef(kind, d.Hex(), d); err != nil {
			t.Fatal(err)
		}
	}
	var mark KeptMark
	if err := mark.Update(s); err != nil {
		t.Fatal(err)
	}
	if mark.Keeps(tree) || !mark.Keeps(file) || !mark.Keeps(gitTree) || !mark.Keeps(entries[0].Digest) {
		t.Errorf("kept: tree %v, file %v, git tree %v, the snapshot's entry %v; want false, true, true, true",
			mark.Keeps(tree), mark.Keeps(file), mark.Keeps(gitTree), mark.Keeps(entries[0].Digest))
	}
	// A record written later is read by the next Update.
	later := put([]byte("later"))
	b, _ := json.Marshal(Action{Kind: "file_put", Time: at, Path: "g", File: &later})
	if _, err := s.Put(&Record{Version: Version, Started: at, Finished: at, Status: StatusSucceeded,
		Sandbox: &Sandbox{ID: "sb2", Ended: "killed", Entries: []Entry{{Seq: 1, Time: at, Kind: "file_put", Digest: put(b)}}}}); err != nil {
		t.Fatal(err)
	}
	if mark.Keeps(later) {
		t.Error("kept before the record was read")
	}
	if err := mark.Update(s); err != nil || !mark.Keeps(later) {
		t.Errorf("a record written after the first Update: kept %v, %v", mark.Keeps(later), err)
	}
	if err := os.Chmod(s.BlobPath(tree), 0o600); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(s.BlobPath(tree), []byte("A TREE"), 0o600)
	if p, err := s.Verify(id); err != nil || len(p) != 2 {
		t.Errorf("verify with the tree tampered: %v %v, want a problem for each entry naming it", p, err)
	}
	if _, err := s.RemoveBlob(tree); err != nil {
		t.Fatal(err)
	}
	if p, err := s.Verify(id); err != nil || len(p) != 0 {
		t.Errorf("verify with the tree collected: %v %v", p, err)
	}
	if _, err := s.RemoveBlob(file); err != nil {
		t.Fatal(err)
	}
	if p, err := s.Verify(id); err != nil || len(p) != 1 {
		t.Errorf("verify with a put file's blob missing: %v %v, want one problem", p, err)
	}
	if keys, _ := s.RefKeys("snapshot.alice"); len(keys) != 1 || keys[0] != tree.Hex() {
		t.Errorf("RefKeys: %v", keys)
	}
	if err := s.RemoveRef("snapshot.alice", tree.Hex()); err != nil {
		t.Fatal(err)
	}
	if keys, _ := s.RefKeys("snapshot.alice"); len(keys) != 0 {
		t.Errorf("RefKeys after RemoveRef: %v", keys)
	}
}
