package jobfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
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

// TestPendingFile: a pending file appears at its path only on Commit,
// replacing what was there; Abort leaves the old file and no other; a
// directory or symlink at the path is refused (or, planted after the
// start, a symlink is replaced, never followed); the job's own files of
// the hidden names are never taken over.
func TestPendingFile(t *testing.T) {
	t.Run("O_TMPFILE", testPendingFile)
	t.Run("named", func(t *testing.T) {
		noTmpfile = true
		defer func() { noTmpfile = false }()
		testPendingFile(t)
	})
}

func testPendingFile(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	uid, gid := os.Getuid(), os.Getgid()
	path := filepath.Join(dir, "f.txt")
	os.WriteFile(path, []byte("old"), 0o644)

	p, err := r.CreatePending("f.txt", 0o600, uid, gid)
	if err != nil {
		t.Fatal(err)
	}
	p.WriteString("new content")
	if entries, _ := os.ReadDir(dir); (len(entries) == 1) != !noTmpfile {
		t.Errorf("while it is written the directory holds %v", entries)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("before Commit the path holds %q", b)
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new content" {
		t.Errorf("after Commit: %q", b)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	p.Abort() // after Commit: nothing

	p, err = r.CreatePending("f.txt", 0o644, uid, gid)
	if err != nil {
		t.Fatal(err)
	}
	p.WriteString("partial")
	p.Abort()
	if b, _ := os.ReadFile(path); string(b) != "new content" {
		t.Errorf("after Abort: %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("after Abort the directory holds %v", entries)
	}

	os.Mkdir(filepath.Join(dir, "d"), 0o755)
	os.Symlink(filepath.Join(outside, "x"), filepath.Join(dir, "link"))
	for _, rel := range []string{"d", "link", "../x"} {
		if _, err := r.CreatePending(rel, 0o644, uid, gid); err == nil {
			t.Errorf("CreatePending(%q): no error", rel)
		}
	}
	// A symlink planted at the path while it is written is replaced.
	p, err = r.CreatePending("late", 0o644, uid, gid)
	if err != nil {
		t.Fatal(err)
	}
	p.WriteString("mine")
	os.Symlink(filepath.Join(outside, "y"), filepath.Join(dir, "late"))
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "late")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("late: %v %v", fi, err)
	}
	// A directory made at the path meanwhile fails the commit.
	p, err = r.CreatePending("late2", 0o644, uid, gid)
	if err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(dir, "late2"), 0o755)
	if err := p.Commit(); err == nil {
		t.Error("commit over a directory: no error")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("something was written outside: %v", entries)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), PendingPrefix) {
			t.Errorf("a hidden file is left: %s", e.Name())
		}
	}
}
