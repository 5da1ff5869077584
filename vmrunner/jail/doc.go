// Package jail is the sandbox every step runs in: the agentsandbox binary
// re-executes itself as the jail's init, the way runc does.
//
// The parent (Start) starts /proc/self/exe with the hidden argument InitArg
// in new mount, pid, ipc and uts namespaces. The child holds still until the
// parent has put it in the step's cgroup and sent the configuration as JSON
// over a pipe (Release); only then does it build anything. It then
//
//  1. joins the step's named network namespace with setns(2) on its locked
//     main thread (the netns descriptor arrives in ExtraFiles; the parent's
//     threads never change namespace),
//  2. unshares a cgroup namespace, so its cgroup root is the step's cgroup,
//  3. makes every mount private and builds a fresh root on a tmpfs from the
//     Plan: read-only binds of the Nix closure or of the host's /usr, /bin,
//     /lib*, a generated /etc, /workspace read-write, the control directory at
//     guest.ControlMount (root only), a sized /tmp, a minimal /dev, a fresh
//     /proc with runc's masked and read-only paths, and no /sys,
//  4. pivots into that root and detaches the old one, sets the hostname,
//  5. drops every capability but CAP_SETUID, CAP_SETGID and CAP_KILL from the
//     bounding, permitted, effective, inheritable and ambient sets, sets
//     no_new_privs, and
//  6. re-executes itself (stage 2) from that thread, so that every thread of
//     the init that runs the job carries the reduced credentials and the
//     netns (capabilities and setns are per thread in Linux).
//
// Stage 2 is PID 1 of the jail: it reports "ready" to the parent and runs
// guest.RunJob on guest.ControlMount, the same job.json/result.json protocol
// as the VM's agent. The job runs as the Job's uid and gid (nobody by
// default), so it holds no capabilities at all. Setup errors travel back to
// the parent as JSON over a second pipe and surface from Release as, for
// example, "jail setup: mount proc on /proc: permission denied".
//
// The jail's mounts live only in its mount namespace: when its last process
// exits they are gone, so nothing needs unmounting on the host.
//
// Every binary (and test binary) that can start a jail must call MaybeInit
// first thing in main or TestMain.
package jail
