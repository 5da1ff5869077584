package inputs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// TestPlaceStored: inputs a record kept are placed from the store alone,
// with their sources gone; a tampered blob and a missing one are errors.
func TestPlaceStored(t *testing.T) {
	f := newFetcher(t)
	base := t.TempDir()
	writeFile(t, filepath.Join(base, "data.txt"), []byte("data\n"))
	writeFile(t, filepath.Join(base, "tree", "sub", "b.txt"), []byte("b"))
	ctx := context.Background()
	file, err := f.Fetch(ctx, workflow.Input{Name: "data", Kind: workflow.InputFile, Source: "data.txt", SHA256: sum([]byte("data\n"))}, base, filepath.Join(t.TempDir(), "d"))
	if err != nil {
		t.Fatal(err)
	}
	tree, err := f.Fetch(ctx, workflow.Input{Name: "tree", Kind: workflow.InputFile, Source: "tree"}, base, filepath.Join(t.TempDir(), "t"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(base); err != nil {
		t.Fatal(err)
	}

	out := t.TempDir()
	if err := f.PlaceStored(file.Input, "data.txt", filepath.Join(out, "data")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "data")); string(b) != "data\n" {
		t.Errorf("placed file holds %q", b)
	}
	if err := f.PlaceStored(tree.Input, "tree", filepath.Join(out, "tree")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "tree", "sub", "b.txt")); string(b) != "b" {
		t.Errorf("placed tree's sub/b.txt holds %q", b)
	}
	if err := f.PlaceStored(file.Input, "data.txt", filepath.Join(out, "data")); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("placing over an existing path: %v", err)
	}

	blob := f.Store.BlobPath(file.Input.Digest)
	os.Chmod(blob, 0o644)
	if err := os.WriteFile(blob, []byte("dada\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = f.PlaceStored(file.Input, "data.txt", filepath.Join(out, "tampered"))
	if !errors.Is(err, record.ErrHashMismatch) {
		t.Errorf("tampered blob: %v, want a hash mismatch", err)
	}
	if _, serr := os.Lstat(filepath.Join(out, "tampered")); serr == nil {
		t.Error("a tampered blob left a file at dst")
	}
	if err := os.Remove(blob); err != nil {
		t.Fatal(err)
	}
	if err := f.PlaceStored(file.Input, "data.txt", filepath.Join(out, "gone")); !errors.Is(err, record.ErrBlobMissing) {
		t.Errorf("missing blob: %v, want ErrBlobMissing", err)
	}
}
