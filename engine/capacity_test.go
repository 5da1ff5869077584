package engine

import (
	"path/filepath"
	"runtime"
	"testing"
)

// TestProbeCapacity: the host's CPUs and memory, and the free space of a
// directory that does not exist yet measured at its nearest parent.
func TestProbeCapacity(t *testing.T) {
	dir := t.TempDir()
	c, err := ProbeCapacity(filepath.Join(dir, "runs", "not-yet"))
	if err != nil {
		t.Fatal(err)
	}
	if c.CPUs != runtime.NumCPU() || c.MemoryBytes < 64<<20 || c.DiskBytes <= 0 || c.DiskPath != dir {
		t.Errorf("capacity %+v", c)
	}
}

func BenchmarkProbeCapacity(b *testing.B) {
	dir := b.TempDir()
	for b.Loop() {
		if _, err := ProbeCapacity(dir); err != nil {
			b.Fatal(err)
		}
	}
}
