// Package jailinit is the child's side of a jail (vmrunner/jail): the init
// that the parent starts with the hidden argument jailwire.InitArg. MaybeInit
// says its hello, waits for the configuration (jailwire.ChildConfig), joins
// the step's network namespace, unshares a cgroup namespace, builds the
// root from the plan's mounts and pivots into it, joins a keyring of its
// own, drops capabilities, sets the rlimits and no_new_privs, loads the
// already compiled seccomp filter on every thread (TSYNC), and then runs
// the job (agent.RunJob or agent.RunSession) or, in exec mode, the program,
// as PID 1. vmrunner/jail's package documentation describes the steps and
// why they are in this order.
//
// It is a package of its own, apart from the parent's side, because the
// static agent (cmd/agentsandbox-guest) links it and is started for every
// step: every package the agent links has its init run, and its pages
// mapped, before MaybeInit can take over. The parent's side compiles the
// seccomp profile (vmrunner/seccomp: github.com/elastic/go-seccomp-bpf,
// github.com/moby/profiles/seccomp, the OCI runtime spec) and reads ELF
// headers (debug/elf, and with it compress/zlib and internal/zstd); none of
// that belongs in the init, which imports only the standard library,
// golang.org/x/sys/unix, guest, guest/agent, vmrunner/jail/jailwire and
// vmrunner/seccomp/compiled. cmd/agentsandbox-guest's deps_test.go fails
// if the agent links any of those again.
//
// Any binary whose main calls MaybeInit first can be a jail's init
// (jail.Config.InitPath), such as a test binary: with cgo the init
// re-executes itself as stage 2 (see stage1).
package jailinit
