package record

import (
	"bytes"
	"io"
	"path/filepath"
	"testing"
)

// TestBlobWriter: a blob written as it comes is readable while it is
// written, is stored under the digest PutBlob gives the same bytes, and
// an aborted one leaves nothing.
func TestBlobWriter(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789"), 100_000)
	w, err := s.NewBlobWriter()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(data); i += 65536 {
		if _, err := w.Write(data[i:min(len(data), i+65536)]); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 10)
		if _, err := w.ReadAt(got, int64(i)); err != nil || !bytes.Equal(got, data[i:i+10]) {
			t.Fatalf("read at %d while writing: %q %v", i, got, err)
		}
	}
	if w.Size() != int64(len(data)) {
		t.Errorf("size %d", w.Size())
	}
	d, n, err := w.Commit()
	if err != nil || n != int64(len(data)) {
		t.Fatal(n, err)
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Error("a write after the commit succeeded")
	}
	w.Abort() // after a commit: leaves the blob alone
	if pd, _, err := s.PutBlob(bytes.NewReader(data)); err != nil || pd != d {
		t.Errorf("PutBlob of the same bytes: %s %v, want %s", pd, err, d)
	}
	r, err := s.OpenBlob(d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("the stored blob: %d bytes, %v", len(got), err)
	}

	a, err := s.NewBlobWriter()
	if err != nil {
		t.Fatal(err)
	}
	a.Write([]byte("dropped"))
	a.Abort()
	if tmp, _ := filepath.Glob(filepath.Join(s.Dir(), "blobs", tmpPrefix+"*")); len(tmp) != 0 {
		t.Errorf("temp files left: %v", tmp)
	}
}
