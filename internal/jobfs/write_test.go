package jobfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteBeneath(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	uid, gid := os.Getuid(), os.Getgid()
	if err := r.MkdirAll("a/b/c", 0o755, uid, gid); err != nil {
		t.Fatal(err)
	}
	f, err := r.CreateFile("a/b/c/f.txt", 0o640, uid, gid)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("hello")
	f.Close()
	if b, _ := os.ReadFile(filepath.Join(dir, "a/b/c/f.txt")); string(b) != "hello" {
		t.Fatalf("content %q", b)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "a/b/c/f.txt")); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v", fi.Mode())
	}
	// Symlinks the job planted are never followed, for writing, making
	// directories or removing.
	os.Symlink(outside, filepath.Join(dir, "out"))
	os.Symlink(filepath.Join(outside, "x"), filepath.Join(dir, "link.txt"))
	for name, err := range map[string]error{
		"create through a dir symlink": func() error { _, err := r.CreateFile("out/new.txt", 0o644, uid, gid); return err }(),
		"create over a symlink":        func() error { _, err := r.CreateFile("link.txt", 0o644, uid, gid); return err }(),
		"mkdir through a symlink":      r.MkdirAll("out/d", 0o755, uid, gid),
		"mkdir over a symlink":         r.MkdirAll("out", 0o755, uid, gid),
		"create with ..":               func() error { _, err := r.CreateFile("../x", 0o644, uid, gid); return err }(),
		"remove with ..":               r.Remove("../"+filepath.Base(outside), true),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("something was written outside: %v", entries)
	}
	// Removing a symlink removes the link, not its target.
	os.WriteFile(filepath.Join(outside, "keep"), []byte("x"), 0o644)
	os.Symlink(filepath.Join(outside, "keep"), filepath.Join(dir, "keeplink"))
	if err := r.Remove("keeplink", false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("the symlink's target went: %v", err)
	}
	if err := r.Remove("a", false); err == nil {
		t.Error("a non-empty directory went without all")
	}
	if err := r.Remove("a", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "a")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a is still there: %v", err)
	}
	if _, err := os.Lstat(outside); err != nil {
		t.Errorf("outside went: %v", err)
	}
}
