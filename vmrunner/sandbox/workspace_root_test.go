package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/vmrunner/wsquota"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// TestRootWorkspacesMountRelease: as root, Mount lists the mount and its
// loop device in a state file of their own, Release undoes both and
// removes the file, and RemoveRunDir then removes the run directory.
func TestRootWorkspacesMountRelease(t *testing.T) {
	testtier.Root(t)
	if _, err := wsquota.FindMkfs(); err != nil {
		testtier.Skip(t, "root", err.Error())
	}
	if _, err := os.Stat(wsquota.LoopControl); err != nil {
		testtier.Skip(t, "root", wsquota.ErrNoLoop.Error())
	}
	ws, runDir, workspace, stateDir := newTestWorkspaces(t)
	if !ws.Enabled() {
		t.Fatal("workspaces of a root caller get no quota")
	}
	step := workflow.Step{Name: "s", Resources: workflow.Resources{Disk: 8 << 20}}
	if err := ws.Mount(context.Background(), step, workspace); err != nil {
		t.Fatal(err)
	}
	files, err := hoststate.Read(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0].State.Step != hoststate.QuotaStep("s") || len(files[0].State.Mounts) != 1 || len(files[0].State.Loops) != 1 {
		t.Fatalf("state files after Mount: %+v, want one listing the mount and its loop device", files)
	}
	loop := files[0].State.Loops[0]
	if back, _ := wsquota.BackingFile(loop.Device); back != loop.Image {
		t.Errorf("loop device %s serves %q, want %s", loop.Device, back, loop.Image)
	}
	if err := ws.Release("other"); err != nil { // a step without a workspace of its own
		t.Fatal(err)
	}
	if err := ws.Release("s"); err != nil {
		t.Fatal(err)
	}
	if back, _ := wsquota.BackingFile(loop.Device); back == loop.Image {
		t.Errorf("loop device %s still serves %s after Release", loop.Device, back)
	}
	if files, _ := hoststate.Read(stateDir); len(files) != 0 {
		t.Errorf("state files after Release: %v", files)
	}
	if _, err := os.Stat(loop.Image); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("image left after Release (%v)", err)
	}
	if err := ws.RemoveRunDir(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(runDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("run directory left (%v)", err)
	}
}
