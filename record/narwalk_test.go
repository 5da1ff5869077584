package record

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// RestoreNAR of a blob that holds a NAR cut short, at any token boundary
// (go-nix's reader reports a cut between two tokens as a clean end), or
// followed by extra bytes, fails and leaves nothing at the destination.
func TestRestoreNARRefusesTornNAR(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := putTree(t, s, tree{"a": "1", "d/b": "2", "d/c": "3", "l": "->a"})
	whole, err := os.ReadFile(s.BlobPath(h.Blob()))
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if err := restoreAt(t, s, h, dst); err != nil {
		t.Fatalf("whole nar: %v", err)
	}
	os.RemoveAll(dst)
	// Every string of a NAR is padded to 8 bytes: each multiple of 8 is a
	// cut between two tokens.
	for n := 8; n < len(whole); n += 8 {
		d, _, err := s.PutBlob(bytes.NewReader(whole[:n]))
		if err != nil {
			t.Fatal(err)
		}
		err = restoreAt(t, s, NarHash(d), dst)
		if err == nil {
			t.Fatalf("a nar cut at %d of %d bytes was restored", n, len(whole))
		}
		if _, statErr := os.Lstat(dst); statErr == nil {
			t.Fatalf("a nar cut at %d bytes left %s behind (%v)", n, dst, err)
		}
	}
	d, _, err := s.PutBlob(bytes.NewReader(append(bytes.Clone(whole), make([]byte, 8)...)))
	if err != nil {
		t.Fatal(err)
	}
	if err := restoreAt(t, s, NarHash(d), dst); err == nil {
		t.Fatal("a nar with bytes after its end was restored")
	}
}

// An unpack that stops early (here: its root already exists) does not
// leave the NAR reader's goroutine blocked behind it.
func TestUnpackNARStoppedEarlyLeavesNoGoroutine(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Large enough that the reader's goroutine is still parsing when the
	// unpack gives up at the first entry.
	big := tree{}
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		big[name] = string(bytes.Repeat([]byte(name), 256<<10))
	}
	h := putTree(t, s, big)
	dir := openRestorer(t, t.TempDir())
	if err := dir.Mkdir("root", 0o755); err != nil { // exists: the first entry's Mkdir fails
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	for i := 0; i < 50; i++ {
		if err := s.unpackNAR(h, dir, "root"); !errors.Is(err, os.ErrExist) {
			t.Fatalf("unpack into an existing root: %v", err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() >= before+50 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if after := runtime.NumGoroutine(); after >= before+50 {
		t.Errorf("%d goroutines before 50 unpacks that stopped early, %d after", before, after)
	}
}
