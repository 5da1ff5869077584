// launch.go holds the start of a step's VM: the checks on the spec and
// the runner, the sandbox (state file, cgroup, netns and taps), the VM's
// working directory and its share links, the control directory and
// job.json made the hypervisor's, the console's sinks, and the runner
// started in its jail; and cleanup, which undoes all of it.

package vm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/microvm"
	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/vmrunner/sandbox"
	"github.com/agentsandbox/agentsandbox/vmrunner/seccomp"
	"github.com/agentsandbox/agentsandbox/workflow"
)

func check(spec vmrunner.StepSpec) error {
	switch {
	case spec.RunID == "" || spec.Step.Name == "":
		return errors.New("run id and step name are required")
	case spec.Runner == "":
		return errors.New("no runner: the step's microvm.nix runner must be realised first")
	case spec.Workspace == "" || spec.ControlDir == "":
		return errors.New("workspace and control directory are required")
	case spec.Job.GID == HypervisorGID:
		return fmt.Errorf("job gid %d is the hypervisor's group, which can read and write the control directory: run the job as another group", HypervisorGID)
	}
	return nil
}

// run is one step's VM: its sandbox and the VM's working directory.
type run struct {
	b       *Backend
	sb      *sandbox.Sandbox
	workDir string
}

// removeWorkDir empties the VM's working directory of our links and qemu's
// socket, without following them; the directory itself goes with Mkdir's
// removal.
func removeWorkDir(workDir string) error {
	var errs []error
	for _, n := range []string{microvm.ControlSource, microvm.WorkspaceSource} {
		if err := os.Remove(filepath.Join(workDir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove VM working directory: %w", err))
		}
	}
	if ents, err := os.ReadDir(workDir); err == nil {
		for _, e := range ents {
			if e.Type()&fs.ModeSocket != 0 {
				_ = os.Remove(filepath.Join(workDir, e.Name()))
			}
		}
	}
	return errors.Join(errs...)
}

// launched is a started VM and what must be undone after it.
type launched struct {
	r      *run
	ri     RunnerInfo
	con    *consoleWatch
	egress vmrunner.Egress // started; nil when the step has none
	clog   *headTail       // console.log; nil until created
}

// cleanup, once the VM has ended (or to end it), closes the console log,
// stops the egress and removes the sandbox (the jail killed with its
// cgroup if it still runs, the cgroup, the netns with its taps, the
// working directory with its sockets, the state file).
func (l *launched) cleanup() error {
	var errs []error
	if l.clog != nil {
		if err := l.clog.Close(); err != nil {
			errs = append(errs, fmt.Errorf("write console log: %w", err))
		}
	}
	if l.egress != nil {
		errs = append(errs, l.egress.Stop())
	}
	errs = append(errs, l.r.sb.Cleanup())
	return errors.Join(errs...)
}

// launch creates the step's sandbox, the VM's working directory and
// console log, starts the egress and the runner in its jail, and fills in
// res's accelerator and seccomp digest, for batch and session jobs alike. A
// non-nil launched must be cleaned up, also with an error.
func (b *Backend) launch(ctx context.Context, spec vmrunner.StepSpec, res *vmrunner.StepResult) (*launched, error) {
	name := spec.Step.Name
	if err := check(spec); err != nil {
		return nil, err
	}
	limits, err := Limits(spec.Step.Resources, spec.Workspace, cgroup.DeviceOf)
	if err != nil {
		return nil, err
	}
	ri, err := ReadRunner(spec.Runner)
	if err != nil {
		return nil, err
	}
	switch {
	case ri.Hypervisor == "":
		return nil, fmt.Errorf("runner %s names no hypervisor in share/microvm/hypervisor: is it a microvm.nix runner?", spec.Runner)
	case microvm.CheckHypervisor(workflow.Hypervisor(ri.Hypervisor)) != nil:
		// The engine refuses a step's hypervisor before the build
		// (engine.refuse); this runner was built for another one.
		return nil, fmt.Errorf("runner %s: %w", spec.Runner, microvm.CheckHypervisor(workflow.Hypervisor(ri.Hypervisor)))
	case ri.HasVirtiofsd:
		return nil, fmt.Errorf("runner %s has virtiofs shares: not supported yet, use 9p shares", spec.Runner)
	}
	d, err := b.accel(ctx, ri, spec.RunnerNote)
	if err != nil {
		return nil, err
	}
	res.Accel, res.AccelReason = d.Accel, d.Reason
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	workDir := hoststate.VMWorkDir(b.opts.WorkDir, spec.RunID, name)
	rootDir := hoststate.VMRootDir(b.opts.WorkDir, spec.RunID, name)
	hvUID := HypervisorUID(spec.Job.UID)
	sb := sandbox.New(b.opts.StateDir, spec.RunID, name, workDir, rootDir)
	r := &run{b: b, sb: sb, workDir: workDir}
	l := &launched{r: r, ri: ri}
	if err := sb.Create(limits); err != nil {
		return l, err
	}
	for _, tap := range ri.Taps {
		if _, err := sb.NS.CreateTap(netns.Tap{Name: tap, Owner: hvUID, Group: HypervisorGID, MultiQueue: ri.TapMultiQueue, VnetHdr: ri.TapVnetHdr}); err != nil {
			return l, err
		}
	}
	if spec.Egress != nil {
		if err := startEgress(sb.NS, spec, ri); err != nil {
			return l, err
		}
		// Stopped when the VM has ended and before Cleanup deletes the
		// namespace (cleanup).
		l.egress = spec.Egress
	}
	if err := os.MkdirAll(b.opts.WorkDir, 0o700); err != nil {
		return l, fmt.Errorf("create VM directory: %w", err)
	}
	if err := sb.Mkdir(workDir, "VM working directory"); err != nil {
		return l, err
	}
	sb.OnCleanup(func() error { return removeWorkDir(workDir) })
	if err := os.Chown(workDir, hvUID, HypervisorGID); err != nil {
		return l, fmt.Errorf("give the VM working directory to the hypervisor's uid %d: %w", hvUID, err)
	}
	if err := sb.Mkdir(rootDir, "jail root mount point"); err != nil {
		return l, err
	}
	if err := linkShares(workDir, spec); err != nil {
		return l, err
	}
	// The control directory root's and the hypervisor's group's (0770:
	// the hypervisor writes the agent's files, the job cannot look in),
	// the workspace the hypervisor's uid's (the job's, see HypervisorUID)
	// with the job's gid.
	if err := sandbox.PrepareDirs(sandbox.Dirs{
		Control: spec.ControlDir, ControlGID: HypervisorGID, ControlMode: 0o770, Stale: []string{ConsoleLog},
		Workspace: spec.Workspace, UID: hvUID, GID: spec.Job.GID,
	}); err != nil {
		return l, err
	}
	// job.json is the engine's: it wrote spec.Job there, and the record
	// hashes those bytes, so the backend never rewrites it. The hypervisor
	// reads it for the guest agent through the 9p share.
	jobFile := filepath.Join(spec.ControlDir, guest.JobFile)
	if err := os.Chown(jobFile, 0, HypervisorGID); err != nil {
		return l, fmt.Errorf("give job.json to the hypervisor's group: %w", err)
	}
	if err := os.Chmod(jobFile, 0o640); err != nil {
		return l, fmt.Errorf("give job.json to the hypervisor's group: %w", err)
	}
	closure, err := runnerClosure(ctx, spec)
	if err != nil {
		return l, err
	}
	logf, err := os.OpenFile(filepath.Join(spec.ControlDir, ConsoleLog), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return l, fmt.Errorf("create console log: %w", err)
	}
	clog := newHeadTail(logf, ConsoleLogHead, ConsoleLogTail)
	l.clog = clog
	con := newConsoleWatch()
	l.con = con
	outs := []io.Writer{clog, con}
	if spec.Console != nil {
		outs = append(outs, spec.Console)
	}
	cfg := jailConfig(spec, ri, d.Accel, workDir, rootDir, closure)
	cfg.Console = &crlfWriter{w: io.MultiWriter(outs...)}
	cfg.Rlimits = HypervisorRlimits(spec.Step.Resources)
	// The hypervisor runs under the default filter; a step's allowances
	// are for jobs in a namespace jail and do not reach it (the guest's
	// kernel is the job's boundary here).
	filter, err := seccomp.Default()
	if err != nil {
		return l, err
	}
	cfg.Seccomp = filter
	res.Seccomp = filter.DigestString()
	if err := sb.Start(ctx, cfg); err != nil {
		if ctx.Err() != nil {
			return l, err
		}
		return l, fmt.Errorf("start runner %s: %w", cfg.Exec.Argv[0], err)
	}
	return l, nil
}

// linkShares makes the VM working directory's ./control and ./workspace,
// the relative 9p share sources of every runner.
func linkShares(workDir string, spec vmrunner.StepSpec) error {
	for _, l := range []struct{ name, target string }{
		{microvm.ControlSource, spec.ControlDir},
		{microvm.WorkspaceSource, spec.Workspace},
	} {
		abs, err := filepath.Abs(l.target)
		if err != nil {
			return fmt.Errorf("link share %s: %w", l.name, err)
		}
		if err := os.Symlink(abs, filepath.Join(workDir, l.name)); err != nil {
			return fmt.Errorf("link share %s: %w", l.name, err)
		}
	}
	return nil
}
