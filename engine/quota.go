package engine

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

// ImageFile is the name of a step's workspace image, beside its workspace
// and control directories (out of the job's reach on both backends); gc
// (vmrunner/hoststate) knows a workspace quota by it.
const ImageFile = hoststate.WorkspaceImage

// quotas are the workspace filesystems (vmrunner/wsquota) of one run. Each
// step's workspace gets one of resources.disk bytes before anything is
// placed into it, so inputs and needed outputs count too. Once the step's
// outputs are stored (later steps get them from the store, never from this
// workspace) its filesystem is released; what could not be released then
// goes at the end of the run.
type quotas struct {
	stateDir  string // for the state files gc reads; hoststate.DefaultDir when empty
	runID     string
	templates *wsquota.Templates // one mkfs per kind of workspace, kept in the state directory

	mu      sync.Mutex
	mounted []quota
}

// newQuotas makes the quotas of the run in runDir. The filesystem images
// its workspace images are copied from stay between runs in the state
// directory, beside the run directories (hoststate.TemplatesDir): after the
// first apply of a kind of workspace no apply runs mkfs.ext4 for it.
func newQuotas(stateDir, runID, runDir string) *quotas {
	return &quotas{stateDir: stateDir, runID: runID,
		templates: &wsquota.Templates{Dir: hoststate.TemplatesDir(filepath.Dir(runDir))}}
}

type quota struct {
	q     *wsquota.Quota
	state hoststate.State
}

// enabled reports whether workspaces get quotas: when running as root,
// which every isolating backend needs anyway. An unprivileged caller can
// only run the fake backend, which isolates nothing.
func (qs *quotas) enabled() bool { return os.Geteuid() == 0 }

// mount gives step's (empty) workspace directory ws its quota. The state
// file lists the mount and the loop device before either exists.
func (qs *quotas) mount(ctx context.Context, step workflow.Step, ws string) error {
	if !qs.enabled() {
		return nil
	}
	stateDir := qs.stateDir
	if stateDir == "" {
		stateDir = hoststate.DefaultDir
	}
	abs, err := filepath.Abs(ws)
	if err != nil {
		return err
	}
	st := hoststate.New(qs.runID, hoststate.QuotaStep(step.Name))
	image := filepath.Join(filepath.Dir(abs), ImageFile)
	q, err := wsquota.Mount(ctx, wsquota.Spec{
		Image: image, Dir: abs, Bytes: step.Resources.Disk, Inodes: step.Resources.DiskInodes,
		UID: guest.DefaultUID, GID: guest.DefaultGID, Templates: qs.templates,
		Before: func(loop string) error {
			st.Mounts = []string{abs}
			st.Loops = []hoststate.Loop{{Device: loop, Image: image}}
			return hoststate.Write(stateDir, st)
		},
	})
	if err != nil {
		rerr := hoststate.Remove(stateDir, st)
		what := "disk " + workflow.FormatSize(step.Resources.Disk)
		if step.Resources.DiskInodes > 0 {
			what += fmt.Sprintf(", diskInodes %d", step.Resources.DiskInodes)
		}
		return errors.Join(fmt.Errorf("step %q: %s: %w", step.Name, what, err), rerr)
	}
	qs.mu.Lock()
	qs.mounted = append(qs.mounted, quota{q: q, state: st})
	qs.mu.Unlock()
	return nil
}

// release unmounts every workspace of the run, detaches their loop devices
// and removes their images and state files. What it cannot undo stays
// listed for gc.
func (qs *quotas) release() error {
	stateDir := qs.stateDir
	if stateDir == "" {
		stateDir = hoststate.DefaultDir
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	var errs []error
	var left []quota
	for _, m := range qs.mounted {
		if err := m.q.Unmount(); err != nil {
			errs = append(errs, err)
			left = append(left, m)
			continue
		}
		if err := hoststate.Remove(stateDir, m.state); err != nil {
			errs = append(errs, err)
		}
	}
	qs.mounted = left
	return errors.Join(errs...)
}

// releaseStep unmounts step's workspace once its outputs are stored, so a
// long run holds one loop device and image per running step, not per step
// run so far. A workspace that cannot be unmounted now stays for release.
func (qs *quotas) releaseStep(step string) error {
	stateDir := qs.stateDir
	if stateDir == "" {
		stateDir = hoststate.DefaultDir
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	for i, m := range qs.mounted {
		if m.state.Step != hoststate.QuotaStep(step) {
			continue
		}
		if err := m.q.Unmount(); err != nil {
			return fmt.Errorf("release the workspace of step %q: %w", step, err)
		}
		qs.mounted = append(qs.mounted[:i], qs.mounted[i+1:]...)
		return hoststate.Remove(stateDir, m.state)
	}
	return nil
}

// removeRunDir releases the run's quotas and removes runDir, unless a
// workspace is still mounted: then the directory stays for gc, which never
// removes through a mount either.
func (qs *quotas) removeRunDir(runDir string) error {
	if err := qs.release(); err != nil {
		return fmt.Errorf("remove run directory %s: %w (agentsandbox gc removes it later)", runDir, err)
	}
	return os.RemoveAll(runDir)
}
