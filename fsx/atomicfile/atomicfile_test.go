package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	for _, content := range []string{"first", "second, longer"} {
		if err := WriteFile(p, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil || string(b) != content {
			t.Fatalf("read %q %v, want %q", b, err, content)
		}
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
		t.Errorf("perm %v", fi.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
}

func TestCrashBeforeRenameKeepsOldContent(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "record")
	if err := WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { recover() }()
		Write(p, []byte("new"), 0o644, Options{BeforeRename: func() { panic("crash") }})
	}()
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("after a crash before the rename the file reads %q", b)
	}
	ents, _ := os.ReadDir(dir)
	var temps int
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), TempPrefix) {
			temps++
		}
	}
	if temps != 1 {
		t.Errorf("want the crash's one temporary file (named with TempPrefix), got %v", ents)
	}
}

func TestWriteFileErrorNamesPath(t *testing.T) {
	p := filepath.Join(t.TempDir(), "missing", "file")
	err := WriteFile(p, nil, 0o644)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("err = %v", err)
	}
}

func TestWriteSyncFS(t *testing.T) {
	p := filepath.Join(t.TempDir(), "record.json")
	if err := Write(p, []byte("x"), 0o444, Options{SyncFS: true}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "x" {
		t.Fatalf("read %q %v", b, err)
	}
	if err := SyncFS(filepath.Dir(p)); err != nil {
		t.Fatal(err)
	}
}
