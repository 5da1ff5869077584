package record

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A crash after a blob's rename and before the sync that makes its bytes
// durable can leave a short, empty or garbled file under the digest's name.
// Dedup must notice and replace it, never keep it.
func TestTornBlobIsReplacedNotTrusted(t *testing.T) {
	const content = "job output that a crash tore"
	d := Digest(sha256.Sum256([]byte(content)))
	for name, torn := range map[string]string{
		"truncated":  content[:7],
		"empty":      "",
		"same size":  strings.Repeat("\x00", len(content)),
		"longer":     content + "junk",
		"a dir here": "",
	} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			path := s.BlobPath(d)
			if err := os.MkdirAll(filepath.Dir(path), DirMode); err != nil {
				t.Fatal(err)
			}
			if name == "a dir here" {
				if err := os.Mkdir(path, 0o700); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(path, []byte(torn), BlobMode); err != nil {
				t.Fatal(err)
			}
			if name != "a dir here" {
				if err := s.VerifyBlob(d); err == nil {
					t.Fatal("the torn blob verifies; the test is broken")
				}
			}
			got, n, err := s.PutBlob(strings.NewReader(content))
			if name == "a dir here" {
				// Rename cannot replace a directory: PutBlob fails
				// rather than report the digest as stored.
				if err == nil {
					t.Fatal("PutBlob over a directory at the digest path succeeded")
				}
				return
			}
			if err != nil || got != d || n != int64(len(content)) {
				t.Fatalf("PutBlob = %s, %d, %v", got, n, err)
			}
			if err := s.VerifyBlob(d); err != nil {
				t.Fatalf("after PutBlob the blob still does not verify: %v", err)
			}
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			if tmp, _ := filepath.Glob(filepath.Join(s.Dir(), "blobs", tmpPrefix+"*")); len(tmp) != 0 {
				t.Fatalf("temp files left: %v", tmp)
			}
		})
	}
}

// A record that names blobs is only written after they are synced: Put
// leaves nothing pending.
func TestPutSyncsPendingBlobs(t *testing.T) {
	s := newStore(t)
	if _, _, err := s.PutBlob(strings.NewReader("log")); err != nil {
		t.Fatal(err)
	}
	if !s.dirty.Load() {
		t.Fatal("a new blob left nothing pending")
	}
	if _, err := s.Put(sampleRecord(false)); err != nil {
		t.Fatal(err)
	}
	if s.dirty.Load() {
		t.Fatal("Put left blobs pending")
	}
	// A dedup hit still marks the store pending: the copy found may be
	// another writer's, not yet synced.
	if _, _, err := s.PutBlob(strings.NewReader("log")); err != nil {
		t.Fatal(err)
	}
	if !s.dirty.Load() {
		t.Fatal("a dedup hit left nothing pending")
	}
	if err := s.PutRef("git", "abc", Digest{}); err != nil {
		t.Fatal(err)
	}
	if s.dirty.Load() {
		t.Fatal("PutRef left blobs pending")
	}
}

// A damaged record file under the right name is rewritten, not kept.
func TestPutRewritesDamagedRecord(t *testing.T) {
	s := newStore(t)
	r := sampleRecord(false)
	id, err := s.Put(r)
	if err != nil {
		t.Fatal(err)
	}
	path := s.RecordPath(id)
	os.Chmod(path, 0o644)
	if err := os.WriteFile(path, []byte("{"), 0o444); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(r); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(id); err != nil {
		t.Fatalf("Get after a rewrite: %v", err)
	}
}
