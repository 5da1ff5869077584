// Package agentsandbox maps the architecture of AgentSandbox. It holds no
// code, only this map and the tests that keep the layering honest.
//
// Data flows one way:
//
//	workflow.yaml → workflow → engine (resolve → policy → nixgen + nixbuild →
//	                            inputs → vmrunner) → record
//
// The pure core (no syscalls, no privileged edge):
//   - workflow: the YAML format, validation with file:line:col, defaults,
//     the DAG, canonical form and hash.
//   - policy: OPA admission (embedded default policy + the user's) and the
//     decision record.
//   - nixgen, templates: a workflow → NixOS modules and a microvm.nix flake.
//   - record: content-addressed execution records and the blob store.
//   - guest: the job.json / result.json protocol between host and agent.
//
// The application layer:
//   - engine: one run end to end (resolve isolation, admit, realise, fetch
//     inputs, schedule, collect, record); the CLI is a thin caller.
//   - nixbuild: realisation beside generation (nix build, closures, locks).
//
// The privileged edge:
//   - vmrunner: the scheduler, the Backend contract and Classify (a step's
//     status); vmrunner/jail (the sandbox and its init stages, run by the
//     agent), vmrunner/seccomp (the default syscall filter, from Docker's
//     profile), vmrunner/cgroup (quotas), vmrunner/wsquota (each
//     workspace's own size-limited filesystem), vmrunner/hoststate (the
//     names, state files and gc of what steps leave on the host, for both
//     backends), vmrunner/sandbox (a step's host lifecycle), and the
//     backends vmrunner/namespace and vmrunner/vm (which also probes KVM).
//   - netns: network namespaces, veth/tap, tc.
//   - inputs: fetching and checksumming workflow inputs.
//   - guest/agent: the job runner of the agent (cmd/agentsandbox-guest),
//     PID 1 of every sandbox: the VM and the namespace jail.
//   - internal/jobfs: the one way the host reads what a job controls
//     (beneath a root, never through a symlink, bounded).
//
// Test support lives under internal/: runnertest (the conformance suite
// every backend passes), fakebackend (a backend that runs nothing),
// vmfixture (a real kernel, initramfs and microvm.nix-shaped runner),
// testtier (the visible test tiers).
//
// Commands: cmd/agentsandbox (the CLI, one file per command) and
// cmd/agentsandbox-guest (the static guest agent). Hand-written NixOS
// modules live in modules/, the project's flake in flake.nix.
package agentsandbox
