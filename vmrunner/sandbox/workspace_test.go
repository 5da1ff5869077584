package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// newTestWorkspaces makes the workspaces of run "r" with one step
// directory, s's workspace.
func newTestWorkspaces(t *testing.T) (ws *Workspaces, runDir, workspace, stateDir string) {
	t.Helper()
	runDir = filepath.Join(t.TempDir(), "runs", "r")
	workspace = filepath.Join(runDir, "steps", "s", "workspace")
	if err := os.MkdirAll(workspace, 0o700); err != nil {
		t.Fatal(err)
	}
	stateDir = t.TempDir()
	return NewWorkspaces(stateDir, "r", runDir), runDir, workspace, stateDir
}

// TestWorkspacesUnprivileged: without root a workspace stays a plain
// directory (the fake backend's), and the run directory still goes.
func TestWorkspacesUnprivileged(t *testing.T) {
	ws, runDir, workspace, stateDir := newTestWorkspaces(t)
	ws.enabled = false // as for a caller that is not root
	step := workflow.Step{Name: "s", Resources: workflow.Resources{Disk: 8 << 20}}
	if err := ws.Mount(context.Background(), step, workspace); err != nil {
		t.Fatal(err)
	}
	if files, _ := hoststate.Read(stateDir); len(files) != 0 {
		t.Errorf("state files without a quota: %v", files)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(workspace), WorkspaceImage)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("workspace image without a quota (%v)", err)
	}
	if err := ws.Release("s"); err != nil {
		t.Fatal(err)
	}
	if err := ws.RemoveRunDir(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(runDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("run directory left (%v)", err)
	}
}
