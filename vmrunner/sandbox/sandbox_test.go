package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
)

func TestNewNamesWhatTheStepOwns(t *testing.T) {
	sb := New("/state", "run1", "build", "/a", "/b")
	if got, want := sb.NetnsName(), hoststate.NetnsName("run1", "build"); got != want {
		t.Errorf("netns = %q, want %q", got, want)
	}
	if got, want := sb.state.Cgroups, []string{hoststate.CgroupPath("run1", "build")}; !reflect.DeepEqual(got, want) {
		t.Errorf("cgroups = %q, want %q", got, want)
	}
	if got, want := sb.state.Dirs, []string{"/a", "/b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("dirs = %q, want %q", got, want)
	}
}

// states lists the state files in dir.
func states(t *testing.T, dir string) int {
	t.Helper()
	sts, err := hoststate.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(sts)
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func TestCleanupRemovesInReverseOrderThenTheStateFile(t *testing.T) {
	stateDir, base := t.TempDir(), t.TempDir()
	a, b := filepath.Join(base, "a"), filepath.Join(base, "b")
	sb := New(stateDir, "run1", "build", a, b)
	if err := hoststate.Write(stateDir, sb.state); err != nil {
		t.Fatal(err)
	}
	var order []string
	if err := sb.Mkdir(a, "dir a"); err != nil {
		t.Fatal(err)
	}
	sb.OnCleanup(func() error {
		order = append(order, "hook a: a="+boolText(exists(a))+" b="+boolText(exists(b)))
		return nil
	})
	if err := sb.Mkdir(b, "dir b"); err != nil {
		t.Fatal(err)
	}
	sb.OnCleanup(func() error {
		order = append(order, "hook b: a="+boolText(exists(a))+" b="+boolText(exists(b)))
		return nil
	})
	if err := sb.Cleanup(); err != nil {
		t.Fatal(err)
	}
	want := []string{"hook b: a=yes b=yes", "hook a: a=yes b=no"}
	if !reflect.DeepEqual(order, want) {
		t.Errorf("order = %q, want %q", order, want)
	}
	if exists(a) || exists(b) {
		t.Error("directories left behind")
	}
	if n := states(t, stateDir); n != 0 {
		t.Errorf("%d state files left, want 0", n)
	}
}

func boolText(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func TestCleanupFailureKeepsTheStateFile(t *testing.T) {
	stateDir, base := t.TempDir(), t.TempDir()
	a := filepath.Join(base, "a")
	sb := New(stateDir, "run1", "build", a)
	if err := hoststate.Write(stateDir, sb.state); err != nil {
		t.Fatal(err)
	}
	if err := sb.Mkdir(a, "dir a"); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	sb.OnCleanup(func() error { return boom })
	err := sb.Cleanup()
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "clean up (run `agentsandbox gc` to retry): ") {
		t.Fatalf("Cleanup = %v, want the gc hint wrapping boom", err)
	}
	if exists(a) {
		t.Error("a failing removal stopped the others")
	}
	if n := states(t, stateDir); n != 1 {
		t.Errorf("%d state files, want 1 kept for gc", n)
	}
}

func TestMkdirFailureRegistersNothing(t *testing.T) {
	stateDir, base := t.TempDir(), t.TempDir()
	sb := New(stateDir, "run1", "build", base)
	err := sb.Mkdir(base, "jail root mount point")
	if err == nil || !strings.HasPrefix(err.Error(), "create jail root mount point: ") {
		t.Fatalf("Mkdir of an existing dir = %v", err)
	}
	if err := sb.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if !exists(base) {
		t.Error("Cleanup removed a directory Mkdir did not create")
	}
}

// TestCreateAndCleanup creates a real netns and cgroup, each after the
// state file names it, and removes them again.
func TestCreateAndCleanup(t *testing.T) {
	testtier.Root(t)
	stateDir := t.TempDir()
	sb := New(stateDir, "sbtest", "create")
	if err := sb.Create(cgroup.Limits{MemoryBytes: 64 << 20}); err != nil {
		sb.Cleanup()
		t.Fatal(err)
	}
	if n := states(t, stateDir); n != 1 {
		t.Errorf("%d state files, want 1", n)
	}
	if !exists(sb.NS.Path()) {
		t.Errorf("netns %s missing", sb.NS.Path())
	}
	if err := sb.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(netns.RunDir, sb.NetnsName())) {
		t.Error("netns left behind")
	}
	for _, d := range sb.Cgroup.(*cgroup.Group).Dirs() {
		if exists(d) {
			t.Errorf("cgroup dir %s left behind", d)
		}
	}
	if n := states(t, stateDir); n != 0 {
		t.Errorf("%d state files left, want 0", n)
	}
}
