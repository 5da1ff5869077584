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
//
// The files divide the backend by what each part of a step's VM is about:
//
//   - vm.go: the Backend, its Options and their defaults.
//   - sandbox.go: the Sandbox Open returns (Wait, Exec, Usage, Done, Stop).
//   - session.go: a session job's channel (the runner check, the dial, the
//     agent's ping).
//   - launch.go: the start of a VM (checks, the sandbox with its taps, the
//     working directory and share links, job.json for the hypervisor, the
//     runner started in its jail) and cleanup, which undoes it.
//   - jail.go: the jail microvm-run runs in, and the hypervisor's
//     credentials.
//   - limits.go: the hypervisor's cgroup limits and rlimits.
//   - egress.go: the step's egress on the runner's tap, and its shaping.
//   - console.go: the console's copy in console.log, the watch for a panic
//     and the job's start line, and StartError with the console's tail.
//   - wait.go: a batch job's wait with the host's deadline, the step's
//     status, and the shutdown stages.
//   - accel.go: the accelerator decision per runner; kvm.go: the KVM probe
//     it asks.
//   - runnerdir.go: what the backend reads from a runner's directory;
//     qmp.go: one QMP command.
package vm
