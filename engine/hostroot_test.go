package engine

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestHostRootFingerprintCache: the kept digest is the digest of the files
// as they are, and a change to one of them (its size, its times) is seen.
func TestHostRootFingerprintCache(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "os-release"), filepath.Join(dir, "status")
	old := hostRootFiles
	hostRootFiles = []string{a, b, filepath.Join(dir, "missing")}
	t.Cleanup(func() { hostRootFiles = old })
	for _, f := range []string{a, b} {
		if err := os.WriteFile(f, []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	first, err := hostRootFingerprint()
	if err != nil {
		t.Fatal(err)
	}
	again, err := hostRootFingerprint()
	if err != nil || again != first {
		t.Fatalf("second fingerprint %v (%v), want the first %v", again, err, first)
	}
	// Same size, later time: a package database rewritten in place.
	if err := os.WriteFile(b, []byte(b[:len(b)-1]+"X"), 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Second)
	if err := os.Chtimes(b, later, later); err != nil {
		t.Fatal(err)
	}
	changed, err := hostRootFingerprint()
	if err != nil {
		t.Fatal(err)
	}
	want, err := hashHostRoot()
	if err != nil {
		t.Fatal(err)
	}
	if changed == first || changed != want {
		t.Errorf("after a change: %v, want %v (not the old %v)", changed, want, first)
	}
}
