package inputs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	nt "github.com/agentsandbox/agentsandbox/internal/nartest"
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

// TestPlaceStoredRefusesForgedNARs: a tree input whose NAR came from a
// store received from elsewhere (a record's input, a git ref) is placed
// without following any symlink it holds, and a NAR that is not a
// well-formed tree is refused whole: nothing at dst, nothing beside it,
// nothing outside.
func TestPlaceStoredRefusesForgedNARs(t *testing.T) {
	f := newFetcher(t)
	outside := t.TempDir()
	put := func(n nt.Node) record.Digest {
		d, _, err := f.Store.PutBlob(bytes.NewReader(n.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, c := range []struct {
		name string
		nar  nt.Node
		want string
	}{
		{"a symlink out, then a directory of the same name",
			nt.Dir(nt.E("x", nt.Symlink(outside)), nt.E("x", nt.Dir(nt.E("file", nt.File("pwned"))))), `entry "/x" repeats`},
		{"a name .", nt.Dir(nt.E("a", nt.Dir(nt.E(".", nt.Symlink(outside))))), `entry "/a" repeats`},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := record.Input{Name: "tree", Format: record.FormatNAR, Digest: put(c.nar)}
			parent := t.TempDir()
			err := f.PlaceStored(in, "tree", filepath.Join(parent, "content"))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("PlaceStored: %v, want an error with %q", err, c.want)
			}
			if entries, _ := os.ReadDir(parent); len(entries) != 0 {
				t.Errorf("left %v beside dst", entries)
			}
			if entries, _ := os.ReadDir(outside); len(entries) != 0 {
				t.Fatalf("wrote outside: %v", entries)
			}
		})
	}

	// A well-formed NAR holding a symlink out, or being one, is placed with
	// the symlink as a symlink.
	for name, n := range map[string]nt.Node{
		"holding a symlink": nt.Dir(nt.E("x", nt.Symlink(outside))),
		"a symlink":         nt.Symlink(outside),
	} {
		dst := filepath.Join(t.TempDir(), "content")
		in := record.Input{Name: "tree", Format: record.FormatNAR, Digest: put(n)}
		if err := f.PlaceStored(in, "tree", dst); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		link := dst
		if name == "holding a symlink" {
			link = filepath.Join(dst, "x")
		}
		if target, err := os.Readlink(link); err != nil || target != outside {
			t.Errorf("%s: %s is %q, %v; want a symlink to %s", name, link, target, err, outside)
		}
	}

	// A git commit whose ref names a forged NAR is refused the same way.
	commit := strings.Repeat("ab", 20)
	if err := f.Store.PutRef("git", commit, put(nt.Dir(nt.E("x", nt.Symlink(outside)), nt.E("x", nt.File("pwned"))))); err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	_, err := f.Fetch(context.Background(), workflow.Input{Name: "code", Kind: workflow.InputGit, Source: "git::file:///nonexistent", Commit: commit}, t.TempDir(), filepath.Join(parent, "content"))
	if err == nil || !strings.Contains(err.Error(), `entry "/x" repeats`) {
		t.Errorf("git input from a forged ref: %v", err)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Errorf("left %v beside dst", entries)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("wrote outside: %v", entries)
	}
}
