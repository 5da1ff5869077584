// Package vmrunner is the sandbox room: it runs one step of a workflow on
// this host in its isolation backend (a microVM whose hypervisor is held in
// the jail, or the jail alone), with its quotas, deadline and cleanup, and
// hands back the guest agent's result. It defines the Backend contract and the
// step's host facts (StepSpec, StepResult); the engine above it schedules
// and runs whole workflows. It is the privileged edge of the
// project; the pure core (workflow, policy, nixgen, record, guest) never
// imports it.
//
// Subpackages:
//   - jail: the re-exec'd sandbox init (namespaces, root of binds, session,
//     descriptors, keyring, rlimits, seccomp), in job or exec mode.
//   - seccomp: the default system call filter, from Docker's profile.
//   - cgroup: quotas and usage on cgroup v1 and v2.
//   - wsquota: each workspace's own size-limited filesystem.
//   - hoststate: the names of what a step creates on the host, its state
//     file, and gc of both backends and of run directories.
//   - sandbox: one step's host lifecycle (state file, netns, cgroup, jail,
//     deadline, ordered cleanup), shared by both backends.
//   - namespace: the jail backend.
//   - vm: the microvm.nix runner backend and the KVM probe.
//
// The runtime contract (runtime.go) is one primitive: a Backend opens a
// Sandbox for a step; a batch step is RunStep (Open, Wait, Stop) and a
// long-lived one is Open, any number of Execs, and Stop.
package vmrunner

import (
	"io"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// StepSpec is everything a backend needs to run one step.
type StepSpec struct {
	RunID string        // unique per apply; names the step's netns, cgroup and directories
	Step  workflow.Step // the defaulted step (resources, network, isolation, hypervisor)
	Job   guest.Job     // what the guest agent runs

	// Workspace is the host directory mounted read-write at /workspace.
	Workspace string
	// ControlDir is the host directory holding job.json; the agent writes
	// result.json and the log files there.
	ControlDir string

	// ClosurePaths are the store paths the namespace backend binds read-only
	// into the jail, and EnvPath the step's buildEnv whose bin/ is on PATH.
	// Both empty: the jail binds the host's /usr, /bin, /lib* and /etc essentials.
	ClosurePaths []string
	EnvPath      string

	// Runner is the store path of the step's realised microvm.nix runner
	// (bin/microvm-run, share/microvm/...); vm backend only.
	Runner string
	// RunnerNote says why the realiser built this runner when it had a
	// choice: a software-emulation runner because KVM cannot run
	// microvm.nix's guests here. The vm backend's accelerator decision,
	// and so every message about it, states it.
	RunnerNote string

	// Console receives the job's output (namespace) or the guest console
	// (vm) live. It may be nil.
	Console io.Writer

	// SeccompAllow are system calls the job may make on top of the jail's
	// default seccomp filter, each one of seccomp.Relaxable (policy data
	// agentsandbox.seccomp.allow; docs/policy.md). Namespace backend only.
	SeccompAllow []string

	// Egress, set when the step has network.allow, is started in the
	// step's network namespace before the job runs and stopped after it
	// ends. Without it the namespace holds only loopback.
	Egress Egress
}

// Status is how a step ended.
type Status string

const (
	StatusSucceeded Status = "succeeded" // the job exited 0
	StatusFailed    Status = "failed"    // the job exited non-zero, was killed, or the guest ended without a result
	StatusTimeout   Status = "timeout"   // the step ran past its timeout and was killed
	StatusOOM       Status = "oom"       // the step's cgroup killed it for memory
)

// Usage is what the step's cgroup measured. The type lives in
// vmrunner/cgroup, which measures it and imports nothing above it; the
// alias keeps StepResult's callers (the backends, the sandbox, the engine,
// the fake) spelling it vmrunner.Usage.
type Usage = cgroup.Usage

// StepResult is a finished step as the host saw it.
type StepResult struct {
	Status Status `json:"status"`
	// Result is the agent's result.json; HasResult is false when the guest
	// ended without writing one (then Status is failed and Detail says why).
	Result    guest.Result `json:"result"`
	HasResult bool         `json:"hasResult"`
	Detail    string       `json:"detail,omitempty"`
	Usage     Usage        `json:"usage"`

	Isolation  workflow.Isolation  `json:"isolation"`            // namespace or vm, never auto
	Hypervisor workflow.Hypervisor `json:"hypervisor,omitempty"` // vm only
	Accel      string              `json:"accel,omitempty"`      // vm only: "kvm" or "tcg"
	// AccelReason is why the VM runs with Accel: the probe's answer for
	// the runner's own CPU model, the runner's build, or an override.
	AccelReason string    `json:"accelReason,omitempty"`
	Started     time.Time `json:"started"`
	Finished    time.Time `json:"finished"`

	// Seccomp is the digest ("sha256:<hex>", seccomp.Profile.Digest) of
	// the filter the job ran under; empty when the backend does not say.
	Seccomp string `json:"seccomp,omitempty"`
}

// KVMAnswer is what a KVM probe found: whether a guest runs under KVM
// with one CPU model and machine, in one line (Reason), and qemu's own
// last lines when it failed (Detail, for --verbose and the record).
type KVMAnswer struct {
	Usable bool   `json:"usable"`
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

// Full is the reason with the detail, for the record and --verbose.
func (a KVMAnswer) Full() string {
	if a.Detail == "" {
		return a.Reason
	}
	return a.Reason + " (qemu: " + a.Detail + ")"
}
