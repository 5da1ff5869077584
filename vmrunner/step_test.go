package vmrunner

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentsandbox/agentsandbox/guest"
)

func TestCgroupPath(t *testing.T) {
	if got := CgroupPath("01HX", "build/x y"); got != "/agentsandbox/01HX/build_x_y" {
		t.Errorf("CgroupPath = %q", got)
	}
	if got := CgroupPath("r", ".."); got != "/agentsandbox/r/__" {
		t.Errorf("CgroupPath with .. = %q", got)
	}
}

func TestReadResult(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := ReadResult(dir); ok || err == nil {
		t.Fatalf("missing result: ok=%v err=%v", ok, err)
	}
	os.WriteFile(filepath.Join(dir, guest.ResultFile), []byte(`{"version":1,"exitCode":3}`), 0o644)
	r, ok, err := ReadResult(dir)
	if !ok || err != nil || r.ExitCode != 3 {
		t.Fatalf("got %+v %v %v", r, ok, err)
	}
	os.WriteFile(filepath.Join(dir, guest.ResultFile), []byte(`{"version":`), 0o644)
	if _, ok, err := ReadResult(dir); ok || err == nil {
		t.Fatalf("truncated result: ok=%v err=%v", ok, err)
	}
}
