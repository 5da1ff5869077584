package managertest

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// TestUnprivileged: TestManager passes as nobody (uid and gid 65534, no
// groups), so the tests built on this package need no root.
func TestUnprivileged(t *testing.T) {
	testtier.Root(t)
	// t.TempDir's parent is root's alone: nobody gets a directory of
	// its own beneath the system's.
	dir, err := os.MkdirTemp("", "managertest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	// The test binary may sit in a directory only root can enter.
	bin := filepath.Join(dir, "managertest.test")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run", "^TestManager$", "-test.count=1", "-test.v")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestManager") {
		t.Fatalf("TestManager as uid 65534: %v\n%s", err, out)
	}
}
