package engine

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentsandbox/agentsandbox/vmrunner"
)

func TestGCRunsRemovesOnlyDeadOwners(t *testing.T) {
	root := t.TempDir()
	live := filepath.Join(root, "live")
	dead := filepath.Join(root, "dead")
	for _, d := range []string{live, dead} {
		if err := os.MkdirAll(filepath.Join(d, "steps", "s", "workspace"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeOwner(live, "live"); err != nil { // this process: alive
		t.Fatal(err)
	}
	gone := vmrunner.NewState("dead", "run")
	gone.PID, gone.PIDStart = 1<<22+7, 1 // no such process
	b, _ := json.Marshal(gone)
	if err := os.WriteFile(filepath.Join(dead, ownerFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	removed, err := GCRuns(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != "dir "+dead {
		t.Errorf("removed %v, want only %s", removed, dead)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the live run's directory was removed: %v", err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead run's directory is still there: %v", err)
	}
}

func TestGCRunsLeavesMountedDirectories(t *testing.T) {
	if got := mountedBelow([]string{"/", "/run/x/runs/a/steps/s/workspace"}, "/run/x/runs/a"); got == "" {
		t.Error("a mount below the run directory was not seen")
	}
	if got := mountedBelow([]string{"/run/x/runs/ab"}, "/run/x/runs/a"); got != "" {
		t.Errorf("a sibling with a common prefix counted as below: %q", got)
	}
}
