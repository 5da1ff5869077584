package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/vmrunner/wsquota"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// WorkspaceImage is the name of a step's workspace image, beside its
// workspace and control directories (out of the job's reach on both
// backends); gc (vmrunner/hoststate) knows a workspace quota by it.
const WorkspaceImage = hoststate.WorkspaceImage

// Workspaces are the workspace filesystems (vmrunner/wsquota) of one run
// (an apply, or one long-lived sandbox), the part of a step's host
// resources that lives longer than its jail or VM: a step's workspace gets
// its filesystem of resources.disk bytes before anything is placed into
// it, so inputs and needed outputs count too, and keeps it after the jail
// has ended, until the step's outputs are stored. Each mount and its loop
// device are listed in a state file of their own (hoststate.QuotaStep)
// before either exists.
//
// The engine says when: Mount while it stages a step, Release once the
// step's outputs are stored (later steps get them from the store, never
// from this workspace), RemoveRunDir at the run's end. The teardown order
// of a step is the backend's Cleanup (jail or VM, cgroup, netns,
// directories, its state file), then Release (unmount, loop device, image,
// state file), then RemoveRunDir.
type Workspaces struct {
	stateDir  string // for the state files gc reads; hoststate.DefaultDir when empty
	runID     string
	runDir    string
	templates *wsquota.Templates // one mkfs per kind of workspace, kept in the state directory
	enabled   bool

	mu      sync.Mutex
	mounted []mountedWorkspace
}

type mountedWorkspace struct {
	q     *wsquota.Quota
	state hoststate.State
}

// NewWorkspaces makes the workspace filesystems of the run runID in
// runDir. The filesystem images its workspace images are copied from stay
// between runs beside the run directories (hoststate.TemplatesDir): after
// the first run of a kind of workspace no run runs mkfs.ext4 for it.
//
// Workspaces get filesystems only when running as root, which every
// isolating backend needs anyway. An unprivileged caller can only run the
// fake backend, which isolates nothing: there Mount mounts nothing and a
// workspace is a plain directory.
func NewWorkspaces(stateDir, runID, runDir string) *Workspaces {
	if stateDir == "" {
		stateDir = hoststate.DefaultDir
	}
	return &Workspaces{stateDir: stateDir, runID: runID, runDir: runDir, enabled: os.Geteuid() == 0,
		templates: &wsquota.Templates{Dir: hoststate.TemplatesDir(filepath.Dir(runDir))}}
}

// Enabled says whether Mount gives workspaces a filesystem of their own.
func (ws *Workspaces) Enabled() bool { return ws.enabled }

// Mount gives step's (empty) workspace directory dir its filesystem of
// step.Resources.Disk bytes and step.Resources.DiskInodes inodes. The
// state file lists the mount and the loop device before either exists.
func (ws *Workspaces) Mount(ctx context.Context, step workflow.Step, dir string) error {
	if !ws.enabled {
		return nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	st := hoststate.New(ws.runID, hoststate.QuotaStep(step.Name))
	image := filepath.Join(filepath.Dir(abs), WorkspaceImage)
	q, err := wsquota.Mount(ctx, wsquota.Spec{
		Image: image, Dir: abs, Bytes: step.Resources.Disk, Inodes: step.Resources.DiskInodes,
		UID: guest.DefaultUID, GID: guest.DefaultGID, Templates: ws.templates,
		Before: func(loop string) error {
			st.Mounts = []string{abs}
			st.Loops = []hoststate.Loop{{Device: loop, Image: image}}
			return hoststate.Write(ws.stateDir, st)
		},
	})
	if err != nil {
		rerr := hoststate.Remove(ws.stateDir, st)
		what := "disk " + workflow.FormatSize(step.Resources.Disk)
		if step.Resources.DiskInodes > 0 {
			what += fmt.Sprintf(", diskInodes %d", step.Resources.DiskInodes)
		}
		return errors.Join(fmt.Errorf("step %q: %s: %w", step.Name, what, err), rerr)
	}
	ws.mu.Lock()
	ws.mounted = append(ws.mounted, mountedWorkspace{q: q, state: st})
	ws.mu.Unlock()
	return nil
}

// Release unmounts step's workspace once its outputs are stored, so a
// long run holds one loop device and image per running step, not per step
// run so far. A workspace that cannot be unmounted now stays for
// RemoveRunDir.
func (ws *Workspaces) Release(step string) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for i, m := range ws.mounted {
		if m.state.Step != hoststate.QuotaStep(step) {
			continue
		}
		if err := m.q.Unmount(); err != nil {
			return fmt.Errorf("release the workspace of step %q: %w", step, err)
		}
		ws.mounted = append(ws.mounted[:i], ws.mounted[i+1:]...)
		return hoststate.Remove(ws.stateDir, m.state)
	}
	return nil
}

// releaseAll unmounts every workspace of the run, detaches their loop
// devices and removes their images and state files. What it cannot undo
// stays listed for gc.
func (ws *Workspaces) releaseAll() error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	var errs []error
	var left []mountedWorkspace
	for _, m := range ws.mounted {
		if err := m.q.Unmount(); err != nil {
			errs = append(errs, err)
			left = append(left, m)
			continue
		}
		if err := hoststate.Remove(ws.stateDir, m.state); err != nil {
			errs = append(errs, err)
		}
	}
	ws.mounted = left
	return errors.Join(errs...)
}

// RemoveRunDir releases the run's workspaces and removes its run
// directory, unless a workspace is still mounted: then the directory stays
// for gc, which never removes through a mount either.
func (ws *Workspaces) RemoveRunDir() error {
	if err := ws.releaseAll(); err != nil {
		return fmt.Errorf("remove run directory %s: %w (agentsandbox gc removes it later)", ws.runDir, err)
	}
	return os.RemoveAll(ws.runDir)
}
