package jailinit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/guest/agent"
	"github.com/agentsandbox/agentsandbox/vmrunner/jail/jailwire"
	"github.com/agentsandbox/agentsandbox/vmrunner/seccomp/compiled"
	"golang.org/x/sys/unix"
)

// MaybeInit runs the jail's init and exits when the binary was started as
// one (os.Args[1] == jailwire.InitArg); otherwise it returns at once. The agent
// (cmd/agentsandbox-guest) calls it first thing in main; a TestMain may
// too, to let its test binary play the init (jail.Config.InitPath).
func MaybeInit() {
	if len(os.Args) < 2 || os.Args[1] != jailwire.InitArg {
		return
	}
	switch os.Getenv(jailwire.EnvStage) {
	case "1":
		os.Exit(stage1())
	case "2":
		os.Exit(stage2())
	}
	fmt.Fprintf(os.Stderr, "%s is internal to agentsandbox; it is not a command\n", jailwire.InitArg)
	os.Exit(2)
}

func sendMessage(w io.Writer, m jailwire.Message) {
	b, _ := json.Marshal(m)
	_, _ = w.Write(append(b, '\n'))
}

// stage1 builds the jail. It runs on the locked main thread. Namespaces
// joined with setns, capabilities and no_new_privs are per thread in Linux:
// where the Go runtime can apply a system call to all of its threads (a
// binary without cgo, like the released one) stage 1 does so and then runs
// the agent itself; otherwise (cgo, such as test binaries) it changes only
// this thread and re-executes itself from it as stage 2, so that every thread
// of the init that runs the job starts from that thread's state.
func stage1() int {
	runtime.LockOSThread() // never unlocked: this thread may exec stage 2
	// The usual 022, not the umask of whoever ran apply or serve (a VM's
	// agent has the kernel's 022 too): the mount points the init makes are
	// reachable by the job's user, and what a job creates does not depend
	// on the caller. The umask is per process: stage 2 and the job inherit it.
	unix.Umask(0o022)
	statusFD, err := fdFromEnv(jailwire.EnvStatusFD)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	status := os.NewFile(uintptr(statusFD), "status")
	// The handshake: the parent sends the config only to an init that
	// speaks its protocol.
	hello := jailwire.OurHello()
	sendMessage(status, jailwire.Message{Hello: &hello})
	fail := func(err error) int {
		sendMessage(status, jailwire.Message{Error: "jail setup: " + err.Error()})
		return 1
	}
	cfgFD, err := fdFromEnv(jailwire.EnvConfigFD)
	if err != nil {
		return fail(err)
	}
	netnsFD, err := fdFromEnv(jailwire.EnvNetnsFD)
	if err != nil {
		return fail(err)
	}
	// Only the three descriptors the parent passed on purpose stay open.
	if err := closeInherited(cfgFD, statusFD, netnsFD); err != nil {
		return fail(err)
	}
	// Held here until the parent has placed us in the cgroup.
	cfgFile := os.NewFile(uintptr(cfgFD), "config")
	var cfg jailwire.ChildConfig
	if err := json.NewDecoder(cfgFile).Decode(&cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return 1 // the parent gave up before releasing us
		}
		return fail(fmt.Errorf("read config: %w", err))
	}
	cfgFile.Close()

	t := threads{all: allThreadsWork()}
	if err := t.setns(netnsFD, unix.CLONE_NEWNET); err != nil {
		return fail(fmt.Errorf("join network namespace: %w", err))
	}
	unix.Close(netnsFD)
	// The cgroup namespace is made now, not at clone, so that its root is
	// the step's cgroup the parent has just put us in.
	if err := t.unshareCgroup(); err != nil {
		return fail(fmt.Errorf("unshare cgroup namespace: %w", err))
	}
	if err := buildRoot(cfg); err != nil {
		return fail(err)
	}
	if cfg.Hostname != "" {
		if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
			return fail(fmt.Errorf("set hostname %q: %w", cfg.Hostname, err))
		}
	}
	// A keyring of its own, not the caller's session keyring.
	if err := t.joinSessionKeyring(); err != nil {
		return fail(fmt.Errorf("join a new session keyring: %w", err))
	}
	if err := t.dropPrivileges(); err != nil {
		return fail(err)
	}
	if err := setRlimits(cfg.Rlimits); err != nil {
		return fail(err)
	}
	if t.all {
		if err := lastSteps(cfg.Seccomp, -1); err != nil {
			return fail(err)
		}
		if cfg.Exec != nil {
			return runExec(status, statusFD, cfg.Exec)
		}
		return runAgent(status, statusFD)
	}
	env := []string{jailwire.EnvStage + "=2", jailwire.EnvStatusFD + "=" + strconv.Itoa(statusFD)}
	if cfg.Exec != nil {
		b, err := json.Marshal(cfg.Exec)
		if err != nil {
			return fail(fmt.Errorf("encode exec spec for stage 2: %w", err))
		}
		env = append(env, jailwire.EnvExec+"="+string(b))
	}
	if err := lastSteps(cfg.Seccomp, statusFD); err != nil {
		return fail(err)
	}
	err = unix.Exec("/proc/self/exe", []string{"agentsandbox-init", jailwire.InitArg}, env)
	return fail(fmt.Errorf("exec init stage 2: %w", err))
}

// closeInherited closes every descriptor from 3 up that is not in keep and
// came through exec (it lacks close-on-exec: the Go runtime opens all of
// its own with it) and marks the rest close-on-exec. The parent passes
// nothing else on purpose (jail.Start marks its own inherited descriptors
// close-on-exec), so this is the second line: a descriptor that got here
// anyway is closed before anything of the job's runs, and is not left open
// in PID 1 for a job running as root to reach through /proc/1/fd.
func closeInherited(keep ...int) error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("list inherited descriptors: %w", err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 || slices.Contains(keep, fd) {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			continue // the directory's own descriptor, closed by now
		}
		if flags&unix.FD_CLOEXEC == 0 {
			if err := unix.Close(fd); err != nil {
				return fmt.Errorf("close inherited descriptor %d: %w", fd, err)
			}
		}
	}
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("mark descriptors close-on-exec: %w", err)
	}
	return nil
}

// setRlimits sets the jail's resource limits on the init, which the job or
// the program inherits. syscall.Setrlimit (not unix's) also tells the Go
// runtime not to restore its own start-up RLIMIT_NOFILE in children.
func setRlimits(r jailwire.Rlimits) error {
	for _, l := range []struct {
		name     string
		resource int
		soft     uint64
		hard     uint64
	}{
		{"RLIMIT_NOFILE", unix.RLIMIT_NOFILE, r.NoFileSoft, r.NoFileHard},
		{"RLIMIT_CORE", unix.RLIMIT_CORE, 0, 0},
		{"RLIMIT_FSIZE", unix.RLIMIT_FSIZE, r.FSize, r.FSize},
	} {
		soft, hard := l.soft, l.hard
		if l.resource == unix.RLIMIT_FSIZE && soft == 0 {
			soft, hard = unix.RLIM_INFINITY, unix.RLIM_INFINITY
		}
		if err := syscall.Setrlimit(l.resource, &syscall.Rlimit{Cur: soft, Max: hard}); err != nil {
			return fmt.Errorf("set %s to %d/%d: %w", l.name, soft, hard, err)
		}
	}
	return nil
}

// lastSteps runs just before the init hands over (to stage 2, the agent or
// the program): every descriptor but passFD (-1: none) close-on-exec,
// then the seccomp filter, on every thread. p is nil only when the jail was
// started with jail.Config.NoSeccomp.
func lastSteps(p compiled.Program, passFD int) error {
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("mark descriptors close-on-exec: %w", err)
	}
	if passFD >= 0 {
		if _, err := unix.FcntlInt(uintptr(passFD), unix.F_SETFD, 0); err != nil {
			return fmt.Errorf("pass descriptor %d to stage 2: %w", passFD, err)
		}
	}
	if p == nil {
		return nil
	}
	return p.Load()
}

// stage2 is the re-executed init of a cgo binary.
func stage2() int {
	statusFD, err := fdFromEnv(jailwire.EnvStatusFD)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := closeInherited(statusFD); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	status := os.NewFile(uintptr(statusFD), "status")
	if v, ok := os.LookupEnv(jailwire.EnvExec); ok {
		var x jailwire.ExecSpec
		if err := json.Unmarshal([]byte(v), &x); err != nil {
			sendMessage(status, jailwire.Message{Error: fmt.Sprintf("jail setup: decode exec spec: %v", err)})
			return 1
		}
		return runExec(status, statusFD, &x)
	}
	return runAgent(status, statusFD)
}

// runExec is PID 1 of an exec-mode jail: it starts the program as x.UID and
// x.GID with no supplementary groups (setuid from root to a non-zero uid
// clears the permitted and effective capabilities; no_new_privs is
// inherited), reports ready, forwards SIGTERM and SIGINT to it, reaps every
// child that ends up with it, and returns the program's exit status, or
// 128+n when signal n killed it.
func runExec(status *os.File, statusFD int, x *jailwire.ExecSpec) int {
	unix.CloseOnExec(statusFD)
	fail := func(err error) int {
		sendMessage(status, jailwire.Message{Error: "jail setup: " + err.Error()})
		return 1
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fail(fmt.Errorf("set parent death signal: %w", err))
	}
	devNull, err := os.Open("/dev/null")
	if err != nil {
		return fail(err)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	proc, err := os.StartProcess(x.Argv[0], x.Argv, &os.ProcAttr{
		Dir:   x.Dir,
		Env:   x.Env,
		Files: []*os.File{devNull, os.Stdout, os.Stderr},
		Sys: &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: uint32(x.UID), Gid: uint32(x.GID), Groups: []uint32{}},
		},
	})
	devNull.Close()
	if err != nil {
		return fail(fmt.Errorf("start %s as uid %d: %w", x.Argv[0], x.UID, err))
	}
	sendMessage(status, jailwire.Message{Ready: true})
	go func() {
		for s := range sigs {
			_ = proc.Signal(s)
		}
	}()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			sendMessage(status, jailwire.Message{Error: fmt.Sprintf("wait for %s: %v", x.Argv[0], err)})
			return 1
		}
		if pid != proc.Pid {
			continue // an orphan reparented to us
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
}

// runAgent is PID 1 of the finished jail: it reports ready and runs the job
// with the guest agent, or serves the session when job.json asks for one
// (agent.RunSession, until SIGTERM). It returns 0 only when result.json was
// written.
func runAgent(status *os.File, statusFD int) int {
	unix.CloseOnExec(statusFD) // the job must not inherit it
	// Die with the host side even if it is killed hard.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		sendMessage(status, jailwire.Message{Error: fmt.Sprintf("jail setup: set parent death signal: %v", err)})
		return 1
	}
	holdThreads(jailwire.InitThreads)
	sendMessage(status, jailwire.Message{Ready: true})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The jail shares the host's kernel: no fsyncs needed (see agent.RunOptions).
	var err error
	if job, jerr := agent.ReadJob(guest.ControlMount); jerr == nil && job.Session {
		// A long-lived sandbox: serve commands on the control directory's
		// socket, to the host only, until SIGTERM.
		_, err = agent.RunSession(ctx, guest.ControlMount, os.Stdout, agent.SessionOptions{NoSync: true, HostOnly: true, PTY: true})
	} else {
		_, err = agent.RunJobWith(ctx, guest.ControlMount, os.Stdout, agent.RunOptions{NoSync: true})
	}
	if err != nil {
		sendMessage(status, jailwire.Message{Error: "run job: " + err.Error()})
		return 1
	}
	if _, err := os.Stat(filepath.Join(guest.ControlMount, guest.ResultFile)); err != nil {
		sendMessage(status, jailwire.Message{Error: "run job: no result written: " + err.Error()})
		return 1
	}
	return 0
}

// holdThreads makes the Go runtime start OS threads until the process has
// n, before the job runs, and keeps them: the runtime parks a thread that
// has nothing to run instead of ending it, and takes a parked one before
// it asks the kernel for a new one. Each goroutine locks itself to a thread
// and waits until all are locked, so no two share one; they unlock and end
// together. Threads started here inherit the dropped capabilities, no_new_privs
// and seccomp filter of the thread that clones them, like any later thread.
func holdThreads(n int) {
	need := n - threadCount()
	if need <= 0 {
		return
	}
	var locked, release sync.WaitGroup
	locked.Add(need)
	release.Add(1)
	for i := 0; i < need; i++ {
		go func() {
			runtime.LockOSThread()
			locked.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	locked.Wait()
	release.Done()
}

// threadCount is the number of threads of this process, from
// /proc/self/task (the jail's /proc), or 0 when it cannot be read.
func threadCount() int {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0
	}
	return len(ents)
}

var mountFlagNames = map[string]uintptr{
	"nosuid": unix.MS_NOSUID,
	"nodev":  unix.MS_NODEV,
	"noexec": unix.MS_NOEXEC,
}

func parseFlags(s string) uintptr {
	var f uintptr
	for _, n := range strings.Split(s, ",") {
		f |= mountFlagNames[n]
	}
	return f
}

// buildRoot mounts the root tmpfs on cfg.RootDir, applies the plan, makes
// the root read-only and pivots into it.
func buildRoot(cfg jailwire.ChildConfig) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	root := cfg.RootDir
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755,size=16m"); err != nil {
		return fmt.Errorf("mount root tmpfs on %s: %w", root, err)
	}
	for _, m := range cfg.Plan {
		if err := apply(root, m); err != nil {
			return err
		}
	}
	if err := unix.Mount("", root, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("remount root read-only: %w", err)
	}
	return pivot(root)
}

// pivot makes root the new / and detaches the old root (runc's
// pivot_root(".", ".") trick, which needs no directory for the old root).
func pivot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("pivot_root: chdir %s: %w", root, err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root %s: %w", root, err)
	}
	// The old root is now stacked on /: keep its unmount from propagating,
	// then detach it.
	if err := unix.Mount("", ".", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("pivot_root: make old root a slave: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("pivot_root: unmount old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("pivot_root: chdir /: %w", err)
	}
	return nil
}

func apply(root string, m jailwire.Mount) error {
	dst := filepath.Join(root, m.Target)
	flags := parseFlags(m.Flags)
	wrap := func(what string, err error) error {
		return fmt.Errorf("%s %s: %w", what, m.Target, err)
	}
	switch m.Op {
	case jailwire.OpDir:
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return wrap("mkdir", err)
		}
		if err := os.Chmod(dst, os.FileMode(m.Mode)); err != nil {
			return wrap("chmod", err)
		}
	case jailwire.OpFile:
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return wrap("mkdir for", err)
		}
		if err := os.WriteFile(dst, []byte(m.Data), os.FileMode(m.Mode)); err != nil {
			return wrap("write", err)
		}
	case jailwire.OpSymlink:
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return wrap("mkdir for", err)
		}
		if err := os.Symlink(m.Source, dst); err != nil {
			return wrap("symlink", err)
		}
	case jailwire.OpBind:
		fi, err := os.Stat(m.Source)
		if err != nil {
			return wrap("bind", err)
		}
		if err := mountPoint(dst, fi.IsDir()); err != nil {
			return wrap("bind", err)
		}
		if err := unix.Mount(m.Source, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", m.Source, m.Target, err)
		}
		rf := uintptr(unix.MS_REMOUNT|unix.MS_BIND) | flags
		if m.ReadOnly {
			rf |= unix.MS_RDONLY
		}
		if err := unix.Mount("", dst, "", rf, ""); err != nil {
			return fmt.Errorf("remount bind of %s on %s (%s): %w", m.Source, m.Target, m.Flags, err)
		}
	case jailwire.OpTmpfs:
		if err := mountPoint(dst, true); err != nil {
			return wrap("mount tmpfs on", err)
		}
		if err := unix.Mount("tmpfs", dst, "tmpfs", flags, m.Data); err != nil {
			return wrap("mount tmpfs on", err)
		}
	case jailwire.OpProc:
		if err := mountPoint(dst, true); err != nil {
			return wrap("mount proc on", err)
		}
		if err := unix.Mount("proc", dst, "proc", flags, ""); err != nil {
			return wrap("mount proc on", err)
		}
	case jailwire.OpDevpts:
		if err := mountPoint(dst, true); err != nil {
			return wrap("mount devpts on", err)
		}
		if err := unix.Mount("devpts", dst, "devpts", flags, m.Data); err != nil {
			return wrap("mount devpts on", err)
		}
	case jailwire.OpMask:
		fi, err := os.Stat(dst)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return wrap("mask", err)
		}
		if fi.IsDir() {
			err = unix.Mount("tmpfs", dst, "tmpfs", unix.MS_RDONLY, "size=0")
		} else {
			err = unix.Mount("/dev/null", dst, "", unix.MS_BIND, "")
		}
		if err != nil {
			return wrap("mask", err)
		}
	case jailwire.OpRdonly:
		if _, err := os.Stat(dst); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err := unix.Mount(dst, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return wrap("bind for read-only", err)
		}
		if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return wrap("remount read-only", err)
		}
	case jailwire.OpDevice:
		var st unix.Stat_t
		if err := unix.Stat(m.Source, &st); err != nil {
			return fmt.Errorf("stat device %s: %w", m.Source, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR {
			return fmt.Errorf("device %s is not a character device", m.Source)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return wrap("mkdir for", err)
		}
		if err := unix.Mknod(dst, unix.S_IFCHR|m.Mode, int(st.Rdev)); err != nil {
			return wrap("mknod", err)
		}
		if err := os.Chown(dst, m.UID, m.GID); err != nil {
			return wrap("chown device", err)
		}
		if err := os.Chmod(dst, os.FileMode(m.Mode)); err != nil {
			return wrap("chmod device", err)
		}
	default:
		return fmt.Errorf("unknown mount op %q for %s", m.Op, m.Target)
	}
	return nil
}

// mountPoint creates an empty directory or file to mount on.
func mountPoint(p string, dir bool) error {
	if dir {
		return os.MkdirAll(p, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

func fdFromEnv(name string) (int, error) {
	v := os.Getenv(name)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return -1, fmt.Errorf("jail init: %s=%q is not a descriptor number (only agentsandbox itself starts the init)", name, v)
	}
	return fd, nil
}
