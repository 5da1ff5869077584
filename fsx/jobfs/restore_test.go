package jobfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// TestRestorerNeverFollowsASymlink: every way a restore writes refuses a
// path through a symlink, or over one, whether it points outside the root
// or stays inside it; nothing is written outside and no existing entry is
// replaced.
func TestRestorerNeverFollowsASymlink(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	tr, err := OpenRestorer(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.MkdirAll("a/b"); err != nil {
		t.Fatal(err)
	}
	if err := tr.Mkdir("a/b/c", 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := tr.Create("a/b/c/f", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("hello"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Symlink(outside, "out"); err != nil {
		t.Fatal(err)
	}
	if err := tr.Symlink("a", "in"); err != nil { // stays inside the root
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(dir, "out")); err != nil || target != outside {
		t.Fatalf("symlink out is %q, %v", target, err)
	}
	for name, err := range map[string]error{
		"mkdir through a symlink":      tr.Mkdir("out/d", 0o755),
		"mkdir through an inner link":  tr.Mkdir("in/d", 0o755),
		"mkdirall through a symlink":   tr.MkdirAll("out/d/e"),
		"mkdirall over a symlink":      tr.MkdirAll("out"),
		"create through a symlink":     func() error { _, err := tr.Create("out/f", 0o644); return err }(),
		"create through an inner link": func() error { _, err := tr.Create("in/b/g", 0o644); return err }(),
		"create over a symlink":        func() error { _, err := tr.Create("out", 0o644); return err }(),
		"symlink through a symlink":    tr.Symlink("x", "out/l"),
		"rename into a symlink":        tr.Rename("a/b/c/f", "out/f"),
		"rename out of a symlink":      tr.Rename("out/x", "a/x"),
		"create with ..":               func() error { _, err := tr.Create("../x", 0o644); return err }(),
		"create absolute":              func() error { _, err := tr.Create(outside+"/x", 0o644); return err }(),
		"mkdir with ..":                tr.Mkdir("a/../../x", 0o755),
		"exists through a symlink":     func() error { _, err := tr.Exists("out/x"); return err }(),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("something was written outside: %v", entries)
	}
	if _, err := os.Lstat(filepath.Join(dir, "a/x")); err == nil {
		t.Error("a rename through a symlink made a/x")
	}

	// Nothing existing is replaced: not a file, not a symlink.
	if _, err := tr.Create("a/b/c/f", 0o644); !errors.Is(err, fs.ErrExist) {
		t.Errorf("create over an existing file: %v", err)
	}
	if err := tr.Mkdir("a", 0o755); !errors.Is(err, fs.ErrExist) {
		t.Errorf("mkdir over an existing directory: %v", err)
	}
	if err := tr.Symlink("y", "out"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("symlink over an existing symlink: %v", err)
	}
	w, _ = tr.Create("g", 0o644)
	w.Close()
	if err := tr.Rename("g", "a/b/c/f"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("rename over an existing file: %v", err)
	}
	if err := tr.Rename("g", "out"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("rename over an existing symlink: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a/b/c/f")); string(b) != "hello" {
		t.Errorf("a/b/c/f holds %q", b)
	}
	if err := tr.Rename("g", "a/h"); err != nil {
		t.Fatal(err)
	}
	if ok, err := tr.Exists("a/h"); !ok || err != nil {
		t.Errorf("a/h after the rename: %v, %v", ok, err)
	}

	// RemoveAll removes a symlink, never what it points to.
	os.WriteFile(filepath.Join(outside, "keep"), []byte("x"), 0o644)
	if err := tr.RemoveAll("out"); err != nil {
		t.Fatal(err)
	}
	if err := tr.RemoveAll("a"); err != nil {
		t.Fatal(err)
	}
	if err := tr.RemoveAll("gone"); err != nil {
		t.Errorf("RemoveAll of a missing path: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("the symlink's target went: %v", err)
	}
}

// TestRestorerOwner: entries a Restorer makes belong to its uid and gid.
func TestRestorerOwner(t *testing.T) {
	testtier.Root(t)
	dir := t.TempDir()
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tr := r.Restorer(4242, 4343)
	if err := tr.MkdirAll("d/e"); err != nil {
		t.Fatal(err)
	}
	if err := tr.Mkdir("d/e/f", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := tr.Symlink("x", "d/l"); err != nil {
		t.Fatal(err)
	}
	w, err := tr.Create("d/file", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	for _, p := range []string{"d", "d/e", "d/e/f", "d/l", "d/file"} {
		info, err := os.Lstat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := info.Sys().(*syscall.Stat_t); st.Uid != 4242 || st.Gid != 4343 {
			t.Errorf("%s is owned by %d:%d, want 4242:4343", p, st.Uid, st.Gid)
		}
	}
}
