// Package vm is the vmrunner.Backend for isolation: vm. Each step runs in
// its own microVM, started by the step's realised microvm.nix runner
// (bin/microvm-run), in the step's own network namespace and cgroup.
//
// Open, for one step, records in the step's state file and then creates: the
// netns (hoststate.NetnsName(run, step)) with the runner's taps
// (share/microvm/tap-interfaces, flags from tap-flags, owned by the
// hypervisor's uid), the step's egress when it has one (spec.Egress,
// started on the runner's one tap, whose transmit queue is shaped to the
// step's bandwidth, and stopped after the VM has ended), the cgroup
// (/agentsandbox/RUN/STEP) sized for guest memory plus MemoryOverhead, and the VM's own working directory, holding
// the links ./control → the step's control directory and ./workspace → its
// workspace that the runner's 9p shares name (see docs/vm.md). It writes
// job.json and starts microvm-run there inside a jail.Config.Exec jail,
// the way Firecracker's jailer wraps Firecracker: in the netns and the
// cgroup, on a read-only root of the host's /usr and the runner's closure,
// with the working directory and the two share sources bound read-write at
// their own paths, /dev/kvm and /dev/net/tun made for it, as HypervisorUID
// (the job's uid; HypervisorFallbackUID for a uid-0 job) and HypervisorGID,
// with no capabilities and no_new_privs. It sends the runner's stdout and
// stderr (the guest console) to StepSpec.Console and to console.log in the
// control directory. For a batch job, Wait then waits with a host deadline
// of the step's timeout plus BootAllowance. Past it, it asks the guest to power off
// (bin/microvm-shutdown, else QMP system_powerdown), then quits qemu over
// QMP, then kills the cgroup.
//
// The step's status follows vmrunner.Classify: an OOM kill of the
// hypervisor makes it oom, else result.json decides; a guest that ends
// without one failed ("guest panicked" when the console showed a kernel
// panic), or timed out when the host stopped it.
// Stop removes everything on every way out, including a cancelled context.
//
// The accelerator is decided once per runner (Backend.accel, AccelDecision):
// KVM where a probe with the runner's own CPU model and machine shows it
// runs a guest, otherwise TCG with a one-line warning; the step's result
// and any start failure state the decision and its reason.
//
// For a session job (session.go) the same VM is kept: the agent serves
// commands over the session channel, a virtio-serial port whose host end
// is qemu's unix socket microvm.SessionSocket in the working directory,
// multiplexed by guest/mux; Stop ends it and removes what a batch step's
// Stop removes.
package vm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/microvm"
	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/nixbuild"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/vmrunner/jail"
	"github.com/agentsandbox/agentsandbox/vmrunner/jail/jailwire"
	"github.com/agentsandbox/agentsandbox/vmrunner/sandbox"
	"github.com/agentsandbox/agentsandbox/vmrunner/seccomp"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Defaults.
const (
	// DefaultWorkDir holds each VM's working directory.
	DefaultWorkDir = "/run/agentsandbox/vms"
	// ConsoleLog is the console's copy in the control directory.
	ConsoleLog = "console.log"
	// DefaultBootAllowance is added to the step's timeout for the host's
	// deadline: boot and power-off under TCG take seconds.
	DefaultBootAllowance = 60 * time.Second
	// DefaultShutdownGrace is how long each shutdown stage waits.
	DefaultShutdownGrace = 3 * time.Second
	// DefaultStartTimeoutKVM and DefaultStartTimeoutTCG bound the time from
	// the hypervisor's start to the job's start line on the console. A
	// guest that has not started its job by then is stopped, and the step
	// fails at once with the console's tail: under KVM that is a host whose
	// KVM cannot run the guest (nested virtualisation), under software
	// emulation a guest that cannot boot.
	DefaultStartTimeoutKVM = 30 * time.Second
	DefaultStartTimeoutTCG = 120 * time.Second
	// DefaultGuestMemory is the guest memory assumed when the step sets none.
	DefaultGuestMemory = 512 << 20
	// MemoryOverheadFixed and MemoryOverheadPercent size the hypervisor's
	// cgroup: guest memory + 256 MiB + 10 % for qemu itself, its device
	// model, 9p buffers and the page cache of the kernel and initrd.
	MemoryOverheadFixed   = 256 << 20
	MemoryOverheadPercent = 10
	// HypervisorPIDs caps the hypervisor's threads (the guest's own pids
	// limit is the guest kernel's business).
	HypervisorPIDs = 512
)

// The hypervisor's credentials. 9p shares with securityModel "none" (what
// nixgen generates) store every file the guest creates as the hypervisor's
// uid and report host ownership to the guest, so the hypervisor runs as the
// job's own uid: what the job creates is the job's on both sides. A uid-0
// job gets HypervisorFallbackUID instead; the hypervisor never runs as root.
// Its group is HypervisorGID, which owns the control directory (root,
// mode 0770): the hypervisor can write result.json there, the job (another
// group) cannot even list it.
const (
	HypervisorFallbackUID = 65533 // "agentsandbox-vm"
	HypervisorGID         = 65533 // "agentsandbox-vm"
)

// HypervisorUID is the uid the hypervisor of a job run as jobUID runs as.
func HypervisorUID(jobUID int) int {
	if jobUID <= 0 {
		return HypervisorFallbackUID
	}
	return jobUID
}

// Markers the backend looks for on the console.
const (
	PanicMarker = "Kernel panic"
)

// Options configure the backend; zero values take the defaults.
type Options struct {
	StateDir      string        // hoststate.DefaultDir
	WorkDir       string        // DefaultWorkDir
	BootAllowance time.Duration // DefaultBootAllowance
	ShutdownGrace time.Duration // DefaultShutdownGrace
	// StartTimeout bounds the job's start (see DefaultStartTimeoutKVM);
	// zero takes the default for the accelerator.
	StartTimeout time.Duration
	// Accel forces "kvm" or "tcg"; empty asks Probe.
	Accel string
	// Probe decides whether KVM runs a guest with the runner's CPU model
	// and machine; ProbeTarget (cached per boot and target) when nil.
	Probe func(ctx context.Context, t Target) vmrunner.KVMAnswer
	// Warn receives the one-line warning, without a "warning:" prefix,
	// when VMs run under software emulation; nil prints it to stderr.
	Warn func(line string)
}

// Backend runs steps in microVMs. It is safe for concurrent Runs of
// distinct steps.
type Backend struct {
	opts Options

	mu     sync.Mutex
	probed map[Target]vmrunner.KVMAnswer // this backend's answers, one per target
	warned map[string]bool               // software-emulation reasons already warned of
}

// New returns the vm backend.
func New(opts Options) *Backend {
	if opts.StateDir == "" {
		opts.StateDir = hoststate.DefaultDir
	}
	if opts.WorkDir == "" {
		opts.WorkDir = DefaultWorkDir
	}
	if opts.BootAllowance == 0 {
		opts.BootAllowance = DefaultBootAllowance
	}
	if opts.ShutdownGrace == 0 {
		opts.ShutdownGrace = DefaultShutdownGrace
	}
	if opts.Probe == nil {
		opts.Probe = ProbeTarget
	}
	if opts.Warn == nil {
		opts.Warn = func(line string) { fmt.Fprintln(os.Stderr, "warning: "+line) }
	}
	return &Backend{opts: opts}
}

// Isolation is vm.
func (b *Backend) Isolation() workflow.Isolation { return workflow.IsolationVM }

// Limits are the hypervisor's cgroup limits for a step whose workspace is
// the directory workspace: guest memory plus the overhead, the vCPUs plus
// one CPU for qemu's I/O threads, and the step's disk IO rates on the block
// device holding the workspace, which deviceOf finds (cgroup.DeviceOf;
// tests pass a fake). The hypervisor does the guest's workspace IO through
// its 9p share on that device, so throttling the hypervisor throttles the
// job. A workspace on no block device (tmpfs, overlayfs, btrfs) cannot be
// throttled, and Limits fails rather than let the step run unthrottled.
func Limits(r workflow.Resources, workspace string, deviceOf func(string) (cgroup.Device, error)) (cgroup.Limits, error) {
	vcpu := r.VCPU
	if vcpu <= 0 {
		vcpu = 1
	}
	l := cgroup.Limits{
		MemoryBytes: hypervisorMemory(r),
		VCPU:        vcpu + 1,
		PIDs:        HypervisorPIDs,
	}
	// The hypervisor serves the guest's 9p workspace share: its IO to that
	// disk is the step's.
	if err := vmrunner.ThrottleWorkspace(&l, r, workspace, deviceOf); err != nil {
		return cgroup.Limits{}, err
	}
	return l, nil
}

// hypervisorMemory is the hypervisor's memory limit: guest memory plus the
// overhead.
func hypervisorMemory(r workflow.Resources) int64 {
	mem := r.Memory
	if mem <= 0 {
		mem = DefaultGuestMemory
	}
	return mem + MemoryOverheadFixed + mem*MemoryOverheadPercent/100
}

// AccelDecision is the accelerator a VM runs with and why, in one line.
// Backend.accel makes it once per runner, from a probe with exactly the
// CPU model and machine that runner passes to qemu; the warning, the
// step's record (StepResult.AccelReason) and a start failure all state it.
type AccelDecision struct {
	Accel  string // "kvm" or "tcg"
	Reason string
}

// accel decides the accelerator for a runner (note: why the realiser built
// it, StepSpec.RunnerNote):
//   - forced by Options.Accel: that one, where the runner can take it;
//   - a runner built for software emulation: TCG, for the realiser's reason;
//   - otherwise KVM where the probe shows KVM runs a guest with the runner's
//     own CPU model and machine, else TCG with a warning. A runner whose
//     target cannot be read is not proven, and gets no other target's
//     answer. A runner built for KVM (microvm.nix bakes -enable-kvm in)
//     cannot fall back: it fails here with what to do instead.
func (b *Backend) accel(ctx context.Context, ri RunnerInfo, note string) (AccelDecision, error) {
	bakedTCG := !ri.AccelFromEnv && ri.BakedAccel == "tcg"
	switch b.opts.Accel {
	case "tcg":
		if ri.AccelFromEnv || bakedTCG {
			return AccelDecision{"tcg", "software emulation forced (--accel tcg or AGENTSANDBOX_ACCEL=tcg)"}, nil
		}
		return AccelDecision{}, fmt.Errorf("runner %s was built for KVM (%s), and software emulation was forced: "+
			"realise the step's software-emulation runner (apply does without --flake; see docs/vm.md), or do not force TCG", ri.Dir, ri.Target)
	case "kvm":
		if !bakedTCG {
			return AccelDecision{"kvm", "KVM forced (--accel kvm), not probed"}, nil
		}
	}
	if bakedTCG {
		if note == "" {
			note = "the runner was built for software emulation"
		}
		return b.decided(AccelDecision{"tcg", note}), nil
	}
	a := b.probe(ctx, ri)
	if a.Usable {
		return AccelDecision{"kvm", a.Reason}, nil
	}
	if ri.AccelFromEnv {
		return b.decided(AccelDecision{"tcg", "KVM cannot run this guest here: " + a.Reason}), nil
	}
	return AccelDecision{}, fmt.Errorf("runner %s was built for KVM, and KVM cannot run its guest here (%s): "+
		"realise the step's software-emulation runner (apply picks it without --flake when KVM fails), or force it with --accel tcg", ri.Dir, a.Reason)
}

// decided warns, once per reason for this backend's life, that VMs run
// under software emulation, and returns d.
func (b *Backend) decided(d AccelDecision) AccelDecision {
	b.mu.Lock()
	defer b.mu.Unlock()
	if d.Accel == "tcg" && !b.warned[d.Reason] {
		if b.warned == nil {
			b.warned = map[string]bool{}
		}
		b.warned[d.Reason] = true
		b.opts.Warn("VMs run under software emulation (TCG), much slower: " + d.Reason)
	}
	return d
}

// probe asks Probe once per target for this backend's life. A runner
// whose target is unknown is answered "not proven" without a probe.
func (b *Backend) probe(ctx context.Context, ri RunnerInfo) vmrunner.KVMAnswer {
	if ri.TargetUnknown != "" {
		return vmrunner.KVMAnswer{Reason: ri.TargetUnknown + ", so KVM is not proven for it"}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if a, ok := b.probed[ri.Target]; ok {
		return a
	}
	a := b.opts.Probe(ctx, ri.Target)
	if ctx.Err() != nil {
		return a // not an answer to keep
	}
	if b.probed == nil {
		b.probed = map[Target]vmrunner.KVMAnswer{}
	}
	b.probed[ri.Target] = a
	return a
}

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

// job is the spec's job as the host's deadline reads it: with the step's
// timeout when the job has none. The engine's job.json already has it (the
// guest agent reads that file, which no backend rewrites).
func job(spec vmrunner.StepSpec) guest.Job {
	j := spec.Job
	if j.TimeoutMS == 0 {
		j.TimeoutMS = spec.Step.Resources.TimeoutMS
	}
	return j
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

// startEgress opens the step's egress on the runner's one tap in the
// step's namespace ns, and shapes what the tap sends the guest to the
// step's bandwidth. On error nothing of the egress is left running.
func startEgress(ns vmrunner.NetRoom, spec vmrunner.StepSpec, ri RunnerInfo) error {
	switch len(ri.Taps) {
	case 1:
	case 0:
		return fmt.Errorf("the step has network.allow, and runner %s has no tap interface (share/microvm/tap-interfaces) to carry it: "+
			"the runner was built without egress; rebuild the step's runner from this workflow (nixgen gives a step with network.allow the tap %s)", spec.Runner, microvm.TapID)
	default:
		return fmt.Errorf("the step has network.allow, and runner %s has %d tap interfaces %q: egress serves exactly one; "+
			"rebuild the step's runner from this workflow (nixgen gives it the one tap %s)", spec.Runner, len(ri.Taps), ri.Taps, microvm.TapID)
	}
	tap := ri.Taps[0]
	if err := spec.Egress.Start(ns, tap); err != nil {
		return err
	}
	if bw := spec.Step.Resources.Bandwidth; bw > 0 {
		if err := ns.SetBandwidth(tap, uint64(bw)); err != nil {
			return errors.Join(fmt.Errorf("shape the guest's tap to resources.bandwidth: %w", err), spec.Egress.Stop())
		}
	}
	return nil
}

// HypervisorRlimits bound the hypervisor in its jail. Every file it writes
// for the guest (the agent's logs and result in the control share, the
// job's files in the workspace) is the guest's doing, so no one file may
// grow past the step's disk; qemu's memfd guest memory (microvm.nix backs
// 9p shares with it) is a file too, hence the guest memory on top.
func HypervisorRlimits(r workflow.Resources) jailwire.Rlimits {
	disk := r.Disk
	if disk <= 0 {
		disk = workflow.DefaultDisk
	}
	return jailwire.Rlimits{FSize: uint64(disk + hypervisorMemory(r))}
}

// ConsoleLogHead and ConsoleLogTail are how much of a guest's console the
// host writes to console.log: the first and the last bytes, with a line
// saying how much was cut between them. A guest can print without end; the
// host's disk must not take it all.
const (
	ConsoleLogHead = 8 << 20
	ConsoleLogTail = 8 << 20
)

// headTail writes the first head bytes to w as they come and keeps the
// last tail bytes after them in a ring, for Close to write after a line
// that counts what was cut.
type headTail struct {
	mu      sync.Mutex
	w       io.WriteCloser
	head    int64
	written int64
	ring    []byte // len tail once used
	tail    int
	pos     int   // next write position in ring
	seen    int64 // bytes past the head
	err     error
}

func newHeadTail(w io.WriteCloser, head, tail int64) *headTail {
	return &headTail{w: w, head: head, tail: int(tail)}
}

func (h *headTail) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(p)
	if room := h.head - h.written; room > 0 {
		k := min(int64(len(p)), room)
		if _, err := h.w.Write(p[:k]); err != nil && h.err == nil {
			h.err = err
		}
		h.written += k
		p = p[k:]
	}
	if len(p) == 0 || h.tail == 0 {
		h.seen += int64(len(p))
		return n, nil
	}
	if h.ring == nil {
		h.ring = make([]byte, h.tail)
	}
	h.seen += int64(len(p))
	if len(p) > h.tail {
		p = p[len(p)-h.tail:]
	}
	k := copy(h.ring[h.pos:], p)
	copy(h.ring, p[k:])
	h.pos = (h.pos + len(p)) % h.tail
	return n, nil // the console must never block on its copy
}

// Close writes the kept tail and closes w.
func (h *headTail) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var kept []byte
	switch {
	case h.seen <= int64(h.tail):
		kept = h.ring[:h.seen]
	default:
		kept = append(append([]byte(nil), h.ring[h.pos:]...), h.ring[:h.pos]...)
		fmt.Fprintf(h.w, "\n[agentsandbox: %d bytes of console output cut here]\n", h.seen-int64(h.tail))
	}
	if _, err := h.w.Write(kept); err != nil && h.err == nil {
		h.err = err
	}
	h.ring = nil
	return errors.Join(h.err, h.w.Close())
}

// runnerClosure is what the jail binds of the Nix store: the spec's closure
// paths (the runner's closure, from the pipeline), else the closure Nix
// reports for a runner in the store; a runner outside the store is bound
// by jailConfig on its own.
func runnerClosure(ctx context.Context, spec vmrunner.StepSpec) ([]string, error) {
	if len(spec.ClosurePaths) > 0 || !strings.HasPrefix(spec.Runner, "/nix/store/") {
		return spec.ClosurePaths, nil
	}
	infos, err := nixbuild.Closure(ctx, []string{storePathOf(spec.Runner)})
	if err != nil {
		return nil, fmt.Errorf("list the runner's closure for its jail: %w", err)
	}
	paths := make([]string, len(infos))
	for i, pi := range infos {
		paths[i] = pi.Path
	}
	return paths, nil
}

// storePathOf cuts a path inside the store to its /nix/store/<hash>-<name>.
func storePathOf(p string) string {
	parts := strings.SplitN(strings.TrimPrefix(filepath.Clean(p), "/nix/store/"), "/", 2)
	return "/nix/store/" + parts[0]
}

// jailConfig is the exec-mode jail microvm-run runs in (see the package
// documentation); the caller adds the netns and the console. Share sources
// are bound at their own paths, where the working directory's links point.
func jailConfig(spec vmrunner.StepSpec, ri RunnerInfo, accel, workDir, rootDir string, closure []string) jail.Config {
	x := &jailwire.ExecSpec{
		Argv:     runnerCommand(ri.Dir),
		Env:      runnerEnv(accel),
		Dir:      workDir,
		UID:      HypervisorUID(spec.Job.UID),
		GID:      HypervisorGID,
		Writable: []string{workDir, absPath(spec.ControlDir), absPath(spec.Workspace)},
	}
	var paths []string
	for _, p := range closure {
		paths = append(paths, storePathOf(p))
	}
	if strings.HasPrefix(ri.Dir, "/nix/store/") {
		paths = append(paths, storePathOf(ri.Dir))
	} else {
		x.ReadOnly = []string{absPath(ri.Dir)}
	}
	return jail.Config{
		RootDir:      rootDir,
		Hostname:     spec.Step.Name,
		ClosurePaths: paths,
		TmpBytes:     JailTmpBytes,
		Exec:         x,
	}
}

// absPath is p made absolute (as linkShares links it) and clean.
func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return filepath.Clean(p)
}

// JailTmpBytes sizes the hypervisor's /tmp in its jail (qemu writes none
// for these runners; it is there for runners that do).
const JailTmpBytes = 16 << 20

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

// runnerCommand is what the jail runs: microvm-run itself. The jail holds
// it until it is in its cgroup.
func runnerCommand(runner string) []string {
	return []string{filepath.Join(runner, "bin", "microvm-run")}
}

// runnerEnv is the runner's environment.
func runnerEnv(accel string) []string {
	return []string{"PATH=/usr/bin:/bin", "ACCEL=" + accel}
}

// crlfWriter turns the serial console's CR LF line ends into LF, so the
// console reads like the job's own output; a lone CR passes through.
type crlfWriter struct {
	mu sync.Mutex
	w  io.Writer
	cr bool // the previous write ended in CR, held back
}

func (c *crlfWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	buf := make([]byte, 0, len(p)+1)
	if c.cr {
		if len(p) == 0 || p[0] != '\n' {
			buf = append(buf, '\r')
		}
		c.cr = false
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '\r' {
			if i+1 == len(p) {
				c.cr = true
				continue
			}
			if p[i+1] == '\n' {
				continue
			}
		}
		buf = append(buf, p[i])
	}
	if _, err := c.w.Write(buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// consoleWatch notices a kernel panic and the job's start line on the
// console, and keeps its last ConsoleTailBytes for errors.
type consoleWatch struct {
	mu       sync.Mutex
	match    []byte // enough of the end to match a marker split across writes
	last     []byte // the console's tail, for errors
	panicked bool
	started  chan struct{} // closed at the job's start line
}

// ConsoleTailBytes is how much of the console an error about a guest that
// did not start shows.
const ConsoleTailBytes = 2048

func newConsoleWatch() *consoleWatch { return &consoleWatch{started: make(chan struct{})} }

func (c *consoleWatch) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	buf := append(c.match, p...)
	if strings.Contains(string(buf), PanicMarker) {
		c.panicked = true
	}
	if strings.Contains(string(buf), guest.ConsoleStartLine) {
		select {
		case <-c.started:
		default:
			close(c.started)
		}
	}
	keep := len(guest.ConsoleStartLine)
	if len(buf) > keep {
		buf = buf[len(buf)-keep:]
	}
	c.match = append(c.match[:0], buf...)
	c.last = append(c.last, p...)
	if len(c.last) > ConsoleTailBytes {
		c.last = append(c.last[:0], c.last[len(c.last)-ConsoleTailBytes:]...)
	}
	return len(p), nil
}

func (c *consoleWatch) state() (panicked, started bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.started:
		started = true
	default:
	}
	return c.panicked, started
}

func (c *consoleWatch) tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.last)
}

// accelOf is the accelerator decision a result holds.
func accelOf(res vmrunner.StepResult) AccelDecision {
	return AccelDecision{Accel: res.Accel, Reason: res.AccelReason}
}

// StartError is a VM whose job never started: its hypervisor ended first,
// or the guest did not get there within the start bound. It is an
// infrastructure error, not the job's failure.
type StartError struct {
	Accel       AccelDecision // what the VM ran with, and why
	What        string        // what happened, for the message
	ConsoleTail string
}

func (e *StartError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the VM's job never started: %s (accel %s", e.What, e.Accel.Accel)
	if e.Accel.Reason != "" {
		b.WriteString(": " + e.Accel.Reason)
	}
	b.WriteString(")")
	if e.Accel.Accel == "kvm" {
		b.WriteString(". KVM on this host may not run this guest (nested virtualisation often cannot); " +
			"force software emulation with 'apply --accel tcg' or AGENTSANDBOX_ACCEL=tcg")
	}
	tail := strings.TrimRight(e.ConsoleTail, "\n")
	if tail == "" {
		b.WriteString("; the console was empty")
	} else {
		b.WriteString("; the console's last lines:")
		lines := strings.Split(tail, "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		for _, l := range lines {
			b.WriteString("\n    " + l)
		}
	}
	return b.String()
}

// startTimeout is the start bound for accel.
func (b *Backend) startTimeout(accel string) time.Duration {
	switch {
	case b.opts.StartTimeout > 0:
		return b.opts.StartTimeout
	case accel == "kvm":
		return DefaultStartTimeoutKVM
	default:
		return DefaultStartTimeoutTCG
	}
}

// errNotStarted cancels the wait when the start bound passes.
var errNotStarted = errors.New("the job did not start in time")

// wait waits for the hypervisor with the host's deadline and turns what it
// sees into the step's result.
func (b *Backend) wait(ctx context.Context, r *run, ri RunnerInfo, spec vmrunner.StepSpec, con *consoleWatch, res vmrunner.StepResult) (vmrunner.StepResult, error) {
	var timeout time.Duration
	if ms := hostTimeoutMS(spec); ms > 0 {
		timeout = time.Duration(ms)*time.Millisecond + guest.KillGrace + b.opts.BootAllowance
	}
	bound := b.startTimeout(res.Accel)
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		t := time.NewTimer(bound)
		defer t.Stop()
		select {
		case <-con.started:
		case <-wctx.Done():
		case <-t.C:
			cancel(errNotStarted)
		}
	}()
	x, err := r.sb.Wait(wctx, timeout, 100*time.Millisecond, func(graceful bool) { r.shutdown(ri, graceful) })
	res.Usage = x.Usage
	if err != nil {
		if ctx.Err() == nil && errors.Is(context.Cause(wctx), errNotStarted) {
			return res, &StartError{Accel: accelOf(res), What: fmt.Sprintf("the guest did not start it within %v, and the host stopped the VM", bound), ConsoleTail: con.tail()}
		}
		return res, err
	}
	usage, hostTimeout := x.Usage, x.HostTimeout
	panicked, started := con.state()
	result, hasResult, rerr := vmrunner.ReadResult(spec.ControlDir)
	res.Result, res.HasResult = result, hasResult
	if !started && !hasResult && !hostTimeout && usage.OOMKills == 0 {
		return res, &StartError{Accel: accelOf(res), What: fmt.Sprintf("the hypervisor ended (%s) before the guest started it", exitText(x.Err)), ConsoleTail: con.tail()}
	}
	res.Status, res.Detail = vmrunner.Classify(vmrunner.Facts{
		Result: result, HasResult: hasResult, ResultErr: rerr,
		Usage: usage, MemoryLimit: hypervisorMemory(spec.Step.Resources),
		TimeoutMS: job(spec).TimeoutMS, HostTimeout: hostTimeout,
		Panicked: panicked,
		Exit:     x.Err,
		Words:    b.words(spec),
	})
	return res, nil
}

// words name the VM in a step's detail.
func (b *Backend) words(spec vmrunner.StepSpec) vmrunner.Words {
	return vmrunner.Words{
		Killed:   "the hypervisor",
		Stopped:  "the host stopped the VM",
		Deadline: fmt.Sprintf("the guest did not finish within the step's %d ms timeout plus %v for boot", hostTimeoutMS(spec), b.opts.BootAllowance),
		NoResult: func(rerr, exit error) string {
			if errors.Is(rerr, fs.ErrNotExist) {
				return fmt.Sprintf("guest powered off without a result (hypervisor: %v)", exitText(exit))
			}
			return fmt.Sprintf("guest left no readable result: %v", rerr)
		},
	}
}

// hostTimeoutMS is the timeout the host enforces: the step's, else the
// job's. The agent enforces the job's inside the guest.
func hostTimeoutMS(spec vmrunner.StepSpec) int64 {
	if ms := spec.Step.Resources.TimeoutMS; ms > 0 {
		return ms
	}
	return spec.Job.TimeoutMS
}

func exitText(err error) string {
	if err == nil {
		return "exited 0"
	}
	return err.Error()
}

// shutdown stops the VM: politely (microvm-shutdown or QMP powerdown) when
// graceful, then QMP quit, then SIGKILL to the whole cgroup, each stage
// given ShutdownGrace to end the hypervisor (sandbox.Stop).
func (r *run) shutdown(ri RunnerInfo, graceful bool) {
	grace := r.b.opts.ShutdownGrace
	sock := r.qmpSocket()
	var stages []sandbox.Stage
	if graceful {
		powerOff := sandbox.Stage{Grace: grace}
		if ri.HasShutdown {
			powerOff.Ask = func() {
				sctx, cancel := context.WithTimeout(context.Background(), grace)
				defer cancel()
				cmd := exec.CommandContext(sctx, filepath.Join(ri.Dir, "bin", "microvm-shutdown"))
				cmd.Dir = r.workDir
				_ = cmd.Run()
			}
		} else if sock != "" {
			powerOff.Ask = func() { _ = qmp(sock, "system_powerdown", grace) }
		}
		stages = append(stages, powerOff)
	}
	if sock != "" {
		stages = append(stages, sandbox.Stage{Ask: func() { _ = qmp(sock, "quit", grace) }, Grace: grace})
	}
	r.sb.Stop(stages...)
}

// qmpSocket finds the runner's control socket: the socket microvm-run
// creates in the VM's working directory that is not the session channel's
// (microvm.SessionSocket).
func (r *run) qmpSocket() string {
	ents, err := os.ReadDir(r.workDir)
	if err != nil {
		return ""
	}
	var socks []string
	for _, e := range ents {
		if e.Type()&fs.ModeSocket != 0 && e.Name() != microvm.SessionSocket {
			socks = append(socks, filepath.Join(r.workDir, e.Name()))
		}
	}
	sort.Strings(socks)
	if len(socks) == 0 {
		return ""
	}
	return socks[0]
}
