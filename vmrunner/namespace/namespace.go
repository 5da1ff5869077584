// Package namespace is the vmrunner.Backend that runs each step in the jail
// alone (isolation: namespace): its own network namespace with only lo, its
// own cgroup holding it to its quotas, and the jail's mount, pid, ipc, uts
// and cgroup namespaces around a read-only root.
//
// Open creates, for one step, in this order and recording each in the step's
// state file before it exists: the netns, the cgroup and the jail's root
// mount point, named by vmrunner/hoststate from (run, step). It writes the
// job to the control directory (root-only, 0700), gives the workspace to the
// job's uid, starts the jail held, places it in the cgroup and releases it.
// For a batch job, Wait then waits with a host-side deadline; for a
// session job, the agent serves commands (guest/session.go) until Stop
// (sandbox.go). Stop removes everything again on every way out — success,
// failure, timeout, setup error and a cancelled context — and then the
// state file goes; hoststate.GC removes what a killed apply left.
//
// The package needs root. A step without network.allow has lo alone. A
// step with it (spec.Egress) gets the step's egress room in its namespace
// before the jail starts: the firewall that sends every TCP connection to
// the host's proxy, and the step's resolver in /etc/resolv.conf
// (docs/network.md).
package namespace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/vmrunner/jail"
	"github.com/agentsandbox/agentsandbox/vmrunner/jail/jailwire"
	"github.com/agentsandbox/agentsandbox/vmrunner/sandbox"
	"github.com/agentsandbox/agentsandbox/vmrunner/seccomp"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// DefaultJailDir holds the jails' (empty) root mount points.
const DefaultJailDir = "/run/agentsandbox/jails"

// InitPIDs is added to a step's pids limit for the jail's init, a Go
// program whose threads count against pids.max like the job's do. The
// init holds jailwire.InitThreads of them from before the job starts.
const InitPIDs = 16

var _ = [InitPIDs - jailwire.InitThreads]struct{}{} // the reserve fits in what the host adds

// HostGrace is how long past its timeout the host lets a step run before it
// kills the whole cgroup itself: the agent's own SIGTERM-then-SIGKILL grace
// plus time for it to write its result.
const HostGrace = guest.KillGrace + 3*time.Second

// ErrPackagesWithoutNix is returned for a step that lists packages but
// comes without a Nix closure.
var ErrPackagesWithoutNix = errors.New("the step lists packages but has no Nix closure: install Nix 2.18 or later (on Debian 12, scripts/install-nix.sh) or remove the packages")

// Options configure the backend; zero values take the defaults.
type Options struct {
	StateDir string // hoststate.DefaultDir
	JailDir  string // DefaultJailDir
	// InitPath is the jail's init binary (jail.Config.InitPath); empty
	// takes the agent (jail.AgentPath).
	InitPath string
}

// Backend runs steps in namespace jails. It is safe for concurrent Opens
// of distinct steps.
type Backend struct {
	opts Options
}

// New returns the namespace backend.
func New(opts Options) *Backend {
	if opts.StateDir == "" {
		opts.StateDir = hoststate.DefaultDir
	}
	if opts.JailDir == "" {
		opts.JailDir = DefaultJailDir
	}
	return &Backend{opts: opts}
}

// Isolation is namespace.
func (b *Backend) Isolation() workflow.Isolation { return workflow.IsolationNamespace }

// Limits are the cgroup limits of a step whose workspace is the directory
// workspace. Disk IO rates throttle the block device that holds the
// workspace, which deviceOf finds (cgroup.DeviceOf; tests pass a fake). A
// workspace on no block device (tmpfs, overlayfs, btrfs) cannot be throttled, and
// Limits fails rather than let the step run unthrottled.
func Limits(r workflow.Resources, workspace string, deviceOf func(string) (cgroup.Device, error)) (cgroup.Limits, error) {
	l := cgroup.Limits{MemoryBytes: r.Memory, VCPU: r.VCPU}
	if r.PIDs > 0 {
		l.PIDs = int64(r.PIDs) + InitPIDs
	}
	if err := vmrunner.ThrottleWorkspace(&l, r, workspace, deviceOf); err != nil {
		return cgroup.Limits{}, err
	}
	return l, nil
}

// check refuses what the backend cannot do, before anything is created.
func check(spec vmrunner.StepSpec) error {
	switch {
	case spec.RunID == "" || spec.Step.Name == "":
		return errors.New("run id and step name are required")
	case len(spec.Step.Packages) > 0 && len(spec.ClosurePaths) == 0:
		return ErrPackagesWithoutNix
	case spec.Workspace == "" || spec.ControlDir == "":
		return errors.New("workspace and control directory are required")
	}
	return nil
}

// hostTimeoutMS is the deadline the host enforces: the step's timeout, or
// the job's when that is shorter (or the step has none). The agent enforces
// the job's own from job.json, which the engine wrote and no backend
// rewrites.
func hostTimeoutMS(spec vmrunner.StepSpec) int64 {
	t, jt := spec.Step.Resources.TimeoutMS, spec.Job.TimeoutMS
	switch {
	case t <= 0:
		return jt
	case jt > 0 && jt < t:
		return jt
	}
	return t
}

// launched is a started jail and what must be undone after it.
type launched struct {
	sb      *sandbox.Sandbox
	egress  vmrunner.Egress // started; nil when the step has none
	seccomp string          // the filter's digest
}

// cleanup stops the egress room, then removes the sandbox (the jail, its
// cgroup, netns, dirs and state file).
func (j *launched) cleanup() error {
	var err error
	if j.egress != nil {
		err = j.egress.Stop()
	}
	return errors.Join(err, j.sb.Cleanup())
}

// launch creates the step's sandbox (state file, netns, cgroup, jail root
// mount point), seals the control directory, starts the egress room and the
// jail, released, for batch and session jobs alike. A non-nil launched must be
// cleaned up, also with an error.
func (b *Backend) launch(ctx context.Context, spec vmrunner.StepSpec) (*launched, error) {
	name := spec.Step.Name
	if err := check(spec); err != nil {
		return nil, err
	}
	limits, err := Limits(spec.Step.Resources, spec.Workspace, cgroup.DeviceOf)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	root := hoststate.JailRoot(b.opts.JailDir, spec.RunID, name)
	j := &launched{sb: sandbox.New(b.opts.StateDir, spec.RunID, name, root)}
	sb := j.sb
	if err := sb.Create(limits); err != nil {
		return j, err
	}
	if err := os.MkdirAll(b.opts.JailDir, 0o700); err != nil {
		return j, fmt.Errorf("create jail directory: %w", err)
	}
	if err := sb.Mkdir(root, "jail root mount point"); err != nil {
		return j, err
	}

	// The control directory root-only, the workspace the job's.
	if err := sandbox.PrepareDirs(sandbox.Dirs{
		Control: spec.ControlDir, ControlMode: 0o700,
		Workspace: spec.Workspace, UID: spec.Job.UID, GID: spec.Job.GID,
	}); err != nil {
		return j, err
	}
	// job.json is the engine's: it wrote spec.Job there, and the record
	// hashes those bytes, so the backend never rewrites it.

	resolv := ""
	if spec.Egress != nil {
		if err := spec.Egress.Start(sb.NS, ""); err != nil {
			return j, err
		}
		// Stopped when the job has ended and before Cleanup deletes the
		// namespace (cleanup).
		j.egress = spec.Egress
		resolv = egress.ResolvConf()
	}

	filter, err := stepSeccomp(spec.SeccompAllow)
	if err != nil {
		return j, err
	}
	j.seccomp = filter.DigestString()
	cfg := jail.Config{
		RootDir: root, Hostname: hostname(name), ResolvConf: resolv,
		Workspace: spec.Workspace, ControlDir: spec.ControlDir,
		ClosurePaths: spec.ClosurePaths, EnvPath: spec.EnvPath,
		TmpBytes: spec.Step.Resources.Disk, Console: spec.Console,
		InitPath: b.opts.InitPath,
		Rlimits:  Rlimits(spec.Step.Resources),
		Seccomp:  filter,
	}
	if err := sb.Start(ctx, cfg); err != nil {
		return j, err
	}
	return j, nil
}

// Rlimits are a step's resource limits in its jail: the default descriptor
// limits, and no file larger than the step's disk.
func Rlimits(r workflow.Resources) jailwire.Rlimits {
	disk := r.Disk
	if disk <= 0 {
		disk = workflow.DefaultDisk
	}
	return jailwire.Rlimits{FSize: uint64(disk)}
}

// stepSeccomp is the default seccomp filter with the step's allowances.
func stepSeccomp(allow []string) (*seccomp.Profile, error) {
	p, err := seccomp.Default()
	if err != nil {
		return nil, err
	}
	return p.Relax(allow)
}

// hostname is the step's name cut to the kernel's 64-byte limit.
func hostname(step string) string {
	if len(step) > 64 {
		return step[:64]
	}
	return step
}

// wait waits for the jail with the host's deadline and turns what it sees
// into the step's result (vmrunner.Classify decides its status).
func wait(ctx context.Context, sb *sandbox.Sandbox, spec vmrunner.StepSpec, res vmrunner.StepResult) (vmrunner.StepResult, error) {
	var timeout time.Duration
	if ms := hostTimeoutMS(spec); ms > 0 {
		timeout = time.Duration(ms)*time.Millisecond + HostGrace
	}
	x, err := sb.Wait(ctx, timeout, 50*time.Millisecond, func(bool) { sb.Kill() })
	res.Usage = x.Usage
	if err != nil {
		return res, err
	}
	result, hasResult, rerr := vmrunner.ReadResult(spec.ControlDir)
	res.Result, res.HasResult = result, hasResult
	res.Status, res.Detail = vmrunner.Classify(vmrunner.Facts{
		Result: result, HasResult: hasResult, ResultErr: rerr,
		Usage: x.Usage, MemoryLimit: spec.Step.Resources.Memory,
		TimeoutMS: hostTimeoutMS(spec), HostTimeout: x.HostTimeout,
		Exit:  x.Err,
		Words: jailWords,
	})
	return res, nil
}

// jailWords name the jail in a step's detail.
var jailWords = vmrunner.Words{
	Stopped: "the host killed the jail's cgroup",
	NoResult: func(rerr, exit error) string {
		return fmt.Sprintf("the jail ended without a result (%v; %v)", rerr, exit)
	},
}
