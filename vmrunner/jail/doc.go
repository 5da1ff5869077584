// Package jail is the sandbox every step runs in, set up the way runc does
// it. This package is the parent's side: Plan, Start, Release, the
// handshake, AgentPath, and the seccomp profile compiled with
// vmrunner/seccomp. Its init is the static agent (cmd/agentsandbox-guest,
// the binary that is PID 1 in a VM), which links the init's side, package
// vmrunner/jail/jailinit, and calls jailinit.MaybeInit first thing; the CLI
// finds it with AgentPath ($AGENTSANDBOX_AGENT, else beside the CLI's own
// executable). What the two sides exchange (the configuration, the Mounts,
// Rlimits, ExecSpec, the Hello) is package vmrunner/jail/jailwire: callers
// name those types there (jailwire.Mount, jailwire.Rlimits, ...).
//
// The parent (Start) starts the agent with the hidden argument
// jailwire.InitArg in new mount, pid, ipc and uts namespaces and a session
// of its own (no controlling terminal), passing only three descriptors: it
// first marks any descriptor it inherited itself close-on-exec, since
// os/exec would pass it on. The child's first message is its Hello
// (jailwire.InitProtocol, guest.ProtocolVersion, jailwire.BuildID); Release
// checks it before anything else and refuses a mismatched init with an
// *AgentError. The child holds still until the parent has put it in the
// step's cgroup and sent the configuration as JSON over a pipe (Release);
// only then does it build anything. It closes every other descriptor that
// came through exec, then
//
//  1. joins the step's named network namespace with setns(2) (the netns
//     descriptor arrives in ExtraFiles, so the parent's threads never change
//     namespace and there is nothing to restore there),
//  2. unshares a cgroup namespace, so its cgroup root is the step's cgroup,
//  3. makes every mount private and builds a fresh root on a tmpfs from the
//     Plan: read-only binds of the Nix closure or of the host's /usr, /bin,
//     /lib*, a generated /etc, /workspace read-write, the control directory at
//     guest.ControlMount (root only), a sized /tmp, a minimal /dev, a fresh
//     /proc with runc's masked and read-only paths, and no /sys,
//  4. pivots into that root and detaches the old one, sets the hostname,
//  5. joins a new session keyring of its own (not the caller's),
//  6. drops every capability but CAP_SETUID, CAP_SETGID and CAP_KILL from the
//     bounding, permitted, effective, inheritable and ambient sets, and sets
//     no_new_privs,
//  7. sets its rlimits (Rlimits: descriptors, no core files, the largest
//     file), which the job inherits,
//  8. marks every descriptor close-on-exec and, last, loads the seccomp
//     filter (Config.Seccomp, by default vmrunner/seccomp's Default, which
//     the parent compiled) on every thread with TSYNC.
//
// Namespaces joined with setns, capabilities and no_new_privs belong to a
// thread, not a process, and a Go program has several threads. In a binary
// without cgo (the agent is built with CGO_ENABLED=0) the
// init applies them to every thread with syscall.AllThreadsSyscall and then
// runs the job itself: one exec in all. In a binary with cgo (a test binary
// playing the init) AllThreadsSyscall is not available: the init changes its
// locked main thread only and re-executes itself from it (stage 2), so every
// thread of the new image starts from that thread's state. A test checks
// every thread of the init either way. A dynamically linked init gets its
// ELF interpreter and libraries bound read-only into a Nix closure root so
// that this re-exec works there.
//
// The init is then PID 1 of the jail: it reports "ready" to the parent and
// runs agent.RunJob on guest.ControlMount, the same job.json/result.json
// protocol as the VM's agent. The job runs as the Job's uid and gid (nobody by
// default), so it holds no capabilities at all; a job run as uid 0 keeps only
// the three above, on a read-only root. Setup errors travel back to the
// parent as JSON over a second pipe and surface from Release as, for
// example, "jail setup: mount proc on /proc: permission denied".
//
// In exec mode (Config.Exec) the jail wraps a program instead, the way
// Firecracker's jailer wraps Firecracker: the root adds the host's /usr and
// the closure together, binds the ExecSpec's directories at their own
// paths, and makes the hypervisor's device nodes (HypervisorDevices) owned
// by its uid; the init starts the program as that non-zero uid and gid with
// no capabilities, stays PID 1 to reap and forward SIGTERM and SIGINT, and
// exits with the program's status. The vm backend runs microvm-run so.
//
// The jail's mounts live only in its mount namespace: when its last process
// exits they are gone, so nothing needs unmounting on the host.
//
// Any binary whose main calls jailinit.MaybeInit first can be the init
// instead (Config.InitPath), such as a test binary; tests of packages that
// start jails build the agent with testtier.MainWithAgent.
package jail
