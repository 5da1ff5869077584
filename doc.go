// Package agentsandbox maps the architecture of AgentSandbox. It holds no
// code, only this map and the tests that keep the layering honest.
//
// Data flows one way:
//
//	workflow.yaml → workflow → engine (resolve → policy → nixgen + nixbuild →
//	                            inputs → vmrunner + netns) → record
//
// Two callers share the engine: the CLI (apply, rerun, records) and the
// server (serve: REST and MCP), which also keeps long-lived sandboxes.
//
// The pure core (no syscalls, no privileged edge):
//   - workflow: the YAML format, validation with file:line:col, defaults,
//     the DAG, canonical form and hash.
//   - policy: OPA admission (embedded default policy + the user's), action
//     decisions, and decision logs in OPA's event format.
//   - nixgen, templates: a workflow → NixOS modules and a microvm.nix flake.
//   - record: content-addressed execution records, the blob store, and
//     comparing runs (records diff, rerun's output comparison); the shared
//     store's interface (record.Remote), push and pull, and its directory
//     implementation; record/provenance: signed SLSA provenance (in-toto, DSSE).
//   - guest: the job.json / result.json and session protocols between host
//     and agent; guest/mux: many streams over one channel (a VM's
//     virtio-serial port).
//   - egress: the rules a step's network is judged by, the audit log;
//     egress/hostaddr: the host's own addresses, which the proxy refuses.
//   - microvm: the contract of the microVM runner, which nixgen writes and
//     the vm backend reads (names in the VM's working directory, the
//     session channel's qemu arguments, the tap, the hypervisors the
//     backend runs; an unsupported one is refused before any build).
//
// The application layer:
//   - engine: one run end to end (resolve isolation, admit, realise, fetch
//     inputs, schedule, collect, record), and sandbox sessions; the CLI is
//     a thin caller.
//   - nixbuild: realisation beside generation (nix build, closures, locks).
//   - sandboxes: the long-lived sandboxes of serve (exec, files,
//     snapshots, network grants, whole workflow runs, journals).
//   - server, server/mcp: the REST API (OpenAPI 3.1) and the MCP server
//     over the same sandboxes; clients/python and clients/js speak it.
//   - s3store: the shared store in an S3-compatible bucket (a
//     record.Remote), the only package that speaks S3.
//   - telemetry: OpenTelemetry traces from the OTEL_* variables, off by
//     default.
//
// The privileged edge:
//   - vmrunner: the scheduler, the Backend contract and Classify (a step's
//     status); vmrunner/jail (the sandbox and its init stages, run by the
//     agent), vmrunner/seccomp (the default syscall filter, from Docker's
//     profile), vmrunner/cgroup (quotas), vmrunner/wsquota (each
//     workspace's own size-limited filesystem), vmrunner/hoststate (the
//     names, state files and gc of what steps leave on the host, for both
//     backends), vmrunner/sandbox (a step's host lifecycle: the one owner of
//     everything a step holds on the host, its workspace filesystem too), and the
//     backends vmrunner/namespace and vmrunner/vm (which also probes KVM).
//   - netns: the network room: network namespaces, veth/tap, tc, the
//     step's nftables; netns/egress/dns, netns/egress/proxy and
//     netns/egress/gateway (the two and the firewall put together): a
//     step's resolver and proxy, served by the host inside the step's
//     namespace, enforcing what egress decides.
//   - inputs: fetching and checksumming workflow inputs.
//   - guest/agent: the job runner of the agent (cmd/agentsandbox-guest),
//     PID 1 of every sandbox: the VM and the namespace jail.
//
// Helpers every layer uses, pure core included, which import nothing of
// the module (fsx: file-system helpers):
//   - fsx/jobfs: the one way the host reads what a job controls
//     (beneath a root, never through a symlink, bounded).
//   - fsx/atomicfile: whole-file writes (temp file, rename).
//
// Test support lives under internal/, and only there: runnertest (the
// conformance suite every backend passes), fakebackend (a backend that
// runs nothing), vmfixture (a real kernel, initramfs and
// microvm.nix-shaped runner), testtier (the visible test tiers), testnet
// (a small internet in a network namespace), managertest (the real
// sandbox manager on fakebackend, and fakeserve), serverproc (server
// processes for client tests), otlptest (an OTLP receiver), nartest (NARs
// written token by token), tenancytest (the check that a server keeps its
// tenants apart).
//
// Each top-level folder is one room: layering_test.go checks the rules
// above per package and per folder, and that the folders the two commands
// link import each other without a cycle.
//
// Commands: cmd/agentsandbox (the CLI, one file per command) and
// cmd/agentsandbox-guest (the static guest agent). Hand-written NixOS
// modules live in modules/, the project's flake in flake.nix, the GitHub
// Actions action in action.yml.
package agentsandbox
