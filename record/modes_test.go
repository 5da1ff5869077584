package record

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStoreIsPrivate: blobs hold job output, so the store's directories are
// 0700 and its blobs 0400, and a store made with looser modes is tightened
// when it is opened.
func TestStoreIsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	for _, sub := range []string{"records", "blobs", "refs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := s.PutBlob(strings.NewReader("secret job output"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "blobs"), filepath.Join(dir, "records"), filepath.Dir(s.BlobPath(d))} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("%s has mode %v, want 0700", p, fi.Mode().Perm())
		}
	}
	fi, err := os.Stat(s.BlobPath(d))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o400 {
		t.Errorf("blob mode %v, want 0400", fi.Mode().Perm())
	}
}

// TestPutNARFuncFailureStoresNothing: a dump that fails (a job's output
// over its limit) leaves no blob and no temp file, and its error survives.
func TestPutNARFuncFailureStoresNothing(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	_, _, err = s.PutNARFunc(func(w io.Writer) error {
		if _, err := w.Write(make([]byte, 100_000)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("PutNARFunc = %v, want boom", err)
	}
	var files []string
	filepath.Walk(filepath.Join(s.Dir(), "blobs"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) > 0 {
		t.Fatalf("a failed dump left %v", files)
	}
}

// TestStoreRefusesSharedDirectory: tightening /tmp would break the host;
// a sticky directory is refused instead.
func TestStoreRefusesSharedDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(dir); err == nil || !strings.Contains(err.Error(), "sticky") {
		t.Fatalf("OpenStore(a sticky directory) = %v", err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o777 {
		t.Fatalf("the shared directory's mode changed to %v", fi.Mode())
	}
}
