// vm.go holds the backend itself: its Options with their defaults, New,
// and the Backend whose Open (sandbox.go) runs each step in a microVM.

package vm

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Defaults.
const (
	// DefaultWorkDir holds each VM's working directory.
	DefaultWorkDir = "/run/agentsandbox/vms"
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

var _ vmrunner.Backend = (*Backend)(nil)

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
