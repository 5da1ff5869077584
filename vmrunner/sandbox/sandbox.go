// Package sandbox owns everything one step holds on the host — its state
// file, network namespace (the room its egress opens in), cgroup and jail
// process, how its control directory and workspace are handed to the jail
// (PrepareDirs), and its workspace filesystem and quota (Workspaces) —
// creates them in order with each recorded in a state file first, and
// removes them in reverse order on every path. docs/isolation.md ("Who
// owns what on the host") lists every resource with its creator and its
// release. Both isolation backends (vmrunner/namespace and
// vmrunner/vm) run their steps through it and keep only what differs: the
// namespace backend's job setup, the vm backend's working directory, taps
// and QMP shutdown.
//
// A backend's Open, Wait and Stop use it like this:
//
//	sb := sandbox.New(stateDir, runID, step, dirs...) // names the netns, cgroup and dirs
//	defer func() { err = errors.Join(err, sb.Cleanup()) }()
//	sb.Create(limits)     // state file, then netns, then cgroup
//	sb.Mkdir(dir, what)   // each directory the backend needs
//	sb.Start(ctx, cfg)    // the jail, in the cgroup, released
//	sb.Wait(ctx, ...)     // with the host's deadline, polling usage
//	sb.Stop(stages...)    // from Wait's stop: ask, wait, ask harder, kill
//
// Cleanup kills the jail and its cgroup, deletes the cgroup, deletes the
// netns, runs the removals registered with Mkdir and OnCleanup (last first)
// and, only when all of that worked, removes the state file; otherwise the
// state file stays for `agentsandbox gc`.
//
// The workspace filesystem outlives the jail: the engine mounts it while
// it stages the step (inputs are placed into it, counted by its quota,
// before the backend opens the sandbox) and releases it once the step's
// outputs are stored, through the run's Workspaces:
//
//	ws := sandbox.NewWorkspaces(stateDir, runID, runDir) // root: quotas; else plain directories
//	defer ws.RemoveRunDir()                               // what is left, then the run directory
//	ws.Mount(ctx, step, workspace)                        // state file, loop device, mount
//	... the backend's Open, Wait, Stop and Cleanup; outputs stored ...
//	ws.Release(step.Name)                                 // unmount, detach, image, state file
//
// The sandbox asks the host for its parts through small interfaces (Netns,
// Cgroup, Process) and waits on an injected clock. The real network
// namespace, cgroup, jail and timers are the defaults; the package's tests
// put fakes in their place that write down, as text, what they were asked,
// so that the lifecycle's order, cancellation, the host's deadline and the
// stop escalation are tested without root and without sleeping. The root
// and VM test tiers of the backends test the real parts.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/agentsandbox/agentsandbox/fsx/jobfs"
	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/vmrunner/jail"
)

// Sandbox is what one step owns on the host. Its fields are set as each
// part is created; a nil field was not (yet) created.
type Sandbox struct {
	stateDir string
	state    hoststate.State

	NS     Netns
	Cgroup Cgroup
	Proc   Process

	undo []func() error // removals registered by Mkdir and OnCleanup

	host  host  // makes the parts: osHost but in tests
	clock clock // realClock but in tests
}

// New names what the step runID/step will own: its netns
// (hoststate.NetnsName(runID, step)), its cgroup (hoststate.CgroupPath(runID, step))
// and dirs, the directories the backend will create, in stateDir's state
// file. It creates nothing.
func New(stateDir, runID, step string, dirs ...string) *Sandbox {
	st := hoststate.New(runID, step)
	st.Netns = []string{hoststate.NetnsName(runID, step)}
	st.Cgroups = []string{hoststate.CgroupPath(runID, step)}
	st.Dirs = append([]string(nil), dirs...)
	return &Sandbox{stateDir: stateDir, state: st, host: osHost{}, clock: realClock{}}
}

// NetnsName is the name of the step's network namespace.
func (s *Sandbox) NetnsName() string { return s.state.Netns[0] }

// Create writes the state file, then creates the netns and then the cgroup
// with limits.
func (s *Sandbox) Create(limits cgroup.Limits) error {
	if err := hoststate.Write(s.stateDir, s.state); err != nil {
		return err
	}
	ns, err := s.host.CreateNetns(s.state.Netns[0])
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			err = fmt.Errorf("%w (left by an earlier run? `agentsandbox gc` removes leftovers)", err)
		}
		return err
	}
	s.NS = ns
	cg, err := s.host.NewCgroup(s.state.Cgroups[0], limits)
	if err != nil {
		return err
	}
	s.Cgroup = cg
	return nil
}

// Mkdir creates dir (mode 0700; it must be one of New's dirs) and has
// Cleanup remove it again; what names it in errors ("create jail root
// mount point: ...").
func (s *Sandbox) Mkdir(dir, what string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", what, err)
	}
	s.OnCleanup(func() error {
		if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", what, err)
		}
		return nil
	})
	return nil
}

// OnCleanup has Cleanup call fn after the netns is deleted. Functions run
// last registered first; their errors keep the state file.
func (s *Sandbox) OnCleanup(fn func() error) { s.undo = append(s.undo, fn) }

// Start starts the jail cfg describes (in the netns, which Start sets) in
// the step's cgroup — cloned straight into it on cgroup v2, placed there
// while held on v1 — and releases it. Setup is quick, but a bind of a hung
// file system is not: it stays cancellable while the jail is being built.
func (s *Sandbox) Start(ctx context.Context, cfg jail.Config) error {
	cfg.NetnsPath = s.NS.Path()
	cgFile, fdErr := s.Cgroup.FD()
	if fdErr == nil {
		defer cgFile.Close()
		cfg.CgroupFD = int(cgFile.Fd())
	}
	proc, err := s.host.StartJail(cfg)
	if err != nil {
		return err
	}
	s.Proc = proc
	if fdErr != nil {
		if err := s.Cgroup.Add(proc.Pid()); err != nil {
			return err
		}
	}
	released := make(chan error, 1)
	go func() { released <- proc.Release() }()
	select {
	case err := <-released:
		return err
	case <-ctx.Done():
		s.Kill()
		<-released
		return ctx.Err()
	}
}

// Kill kills the step's whole cgroup and the jail's init; it does not
// wait.
func (s *Sandbox) Kill() {
	if s.Cgroup != nil {
		_ = s.Cgroup.Kill()
	}
	if s.Proc != nil {
		_ = s.Proc.Kill()
	}
}

// Stage is one way of asking the jail to end, for Stop.
type Stage struct {
	// Ask asks (a power-off, a quit); nil asks nothing and only waits.
	Ask func()
	// Grace is how long Stop then waits for the jail to exit.
	Grace time.Duration
}

// Stop ends the jail, asking more firmly each time: it runs the stages in
// order, each followed by up to its Grace for the jail to exit, and
// returns once it has. When none made it exit, it kills the jail with its
// cgroup (Kill) and waits for the exit.
func (s *Sandbox) Stop(stages ...Stage) {
	for _, st := range stages {
		if s.exited() {
			return
		}
		if st.Ask != nil {
			st.Ask()
		}
		t := s.clock.NewTimer(st.Grace)
		select {
		case <-s.Proc.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
	s.Kill()
	<-s.Proc.Done()
}

// exited says the jail's init has exited.
func (s *Sandbox) exited() bool {
	select {
	case <-s.Proc.Done():
		return true
	default:
		return false
	}
}

// Exit is how the jail ended, as Wait saw it.
type Exit struct {
	// HostTimeout is set when the host's deadline passed.
	HostTimeout bool
	// Usage is the cgroup's usage after the exit.
	Usage vmrunner.Usage
	// Err is the init's exit (jail.Process.Wait).
	Err error
}

// Wait waits until the jail's init exits, reading the cgroup's usage every
// poll so the pids peak is seen where the kernel keeps none. Once timeout
// (when > 0) has passed it calls stop(true) and waits on; when ctx is done
// it calls stop(false), waits for the exit and returns ctx's error. The
// returned Exit has the usage also when Wait fails.
func (s *Sandbox) Wait(ctx context.Context, timeout, poll time.Duration, stop func(timedOut bool)) (Exit, error) {
	var deadline <-chan time.Time
	if timeout > 0 {
		t := s.clock.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C()
	}
	tick := s.clock.NewTicker(poll)
	defer tick.Stop()
	var x Exit
	var cancelled error
loop:
	for {
		select {
		case <-s.Proc.Done():
			break loop
		case <-tick.C():
			_, _ = s.Cgroup.Usage()
		case <-deadline:
			x.HostTimeout = true
			deadline = nil
			stop(true)
		case <-ctx.Done():
			cancelled = ctx.Err()
			stop(false)
			<-s.Proc.Done()
			break loop
		}
	}
	x.Err = s.Proc.Wait()
	usage, err := s.Cgroup.Usage()
	x.Usage = usage
	if cancelled != nil {
		return x, cancelled
	}
	return x, err
}

// Cleanup removes everything in reverse order of creation — the jail
// (killed with its cgroup if it still runs), the cgroup, the netns, then
// the OnCleanup and Mkdir removals — and, when all is gone, the state file.
// It attempts every removal even after one fails.
func (s *Sandbox) Cleanup() error {
	var errs []error
	if s.Proc != nil {
		s.Proc.Close()
		select {
		case <-s.Proc.Done():
		default:
			if s.Cgroup != nil {
				_ = s.Cgroup.Kill()
			}
			if err := s.Proc.Kill(); err != nil {
				errs = append(errs, err)
			}
			<-s.Proc.Done()
		}
	}
	if s.Cgroup != nil {
		if err := s.Cgroup.Delete(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.NS != nil {
		if err := s.NS.Delete(); err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(s.undo) - 1; i >= 0; i-- {
		if err := s.undo[i](); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("clean up (run `agentsandbox gc` to retry): %w", errors.Join(errs...))
	}
	return hoststate.Remove(s.stateDir, s.state)
}

// Dirs is how a step's backend hands the step's directories to its jail
// (PrepareDirs).
type Dirs struct {
	// Control is the control directory: it becomes root's with group
	// ControlGID and mode ControlMode, and the agent's files of an
	// earlier run (result.json, the logs, the session socket) and Stale
	// are removed from it.
	Control     string
	ControlGID  int
	ControlMode os.FileMode
	Stale       []string
	// Workspace is given, with everything beneath it, to UID:GID.
	Workspace string
	UID, GID  int
}

// PrepareDirs seals the control directory and gives the workspace to the
// job's (or its hypervisor's) user, for both backends. The workspace is
// the job's: it is changed through fsx/jobfs, so it must itself be a
// directory and no symlink beneath it is followed.
func PrepareDirs(d Dirs) error {
	if err := os.Chown(d.Control, 0, d.ControlGID); err != nil {
		return fmt.Errorf("seal control directory: %w", err)
	}
	if err := os.Chmod(d.Control, d.ControlMode); err != nil {
		return fmt.Errorf("seal control directory: %w", err)
	}
	stale := append([]string{guest.ResultFile, guest.StdoutFile, guest.StderrFile, guest.SessionSocket}, d.Stale...)
	for _, f := range stale {
		if err := os.Remove(filepath.Join(d.Control, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove stale %s: %w", f, err)
		}
	}
	ws, err := jobfs.Open(d.Workspace)
	if err != nil {
		return fmt.Errorf("give the workspace to uid %d: %w", d.UID, err)
	}
	defer ws.Close()
	if err := ws.LchownAll(".", d.UID, d.GID); err != nil {
		return fmt.Errorf("give the workspace to uid %d: %w", d.UID, err)
	}
	return nil
}
