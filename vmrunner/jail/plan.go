package jail

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/vmrunner/jail/jailwire"
	"github.com/agentsandbox/agentsandbox/vmrunner/seccomp"
)

// Config is what one jail needs.
type Config struct {
	// RootDir is an empty host directory the jail mounts its root tmpfs on.
	// The mount exists only in the jail's mount namespace, so the host
	// directory stays empty; the caller removes it afterwards.
	RootDir string
	// Hostname is set in the jail's uts namespace (the step's name).
	Hostname string
	// NetnsPath names the network namespace the jail joins, such as
	// /run/netns/NAME. It is required: a jail never shares the host's network.
	NetnsPath string
	// ResolvConf, when set, is the jail's /etc/resolv.conf (the step's own
	// resolver, for a step with egress), and names are then looked up in
	// DNS after /etc/hosts. Empty: no resolver at all.
	ResolvConf string
	// Workspace is bound read-write at /workspace.
	Workspace string
	// ControlDir is bound at guest.ControlMount; it should be root-owned
	// and 0700 so that the job cannot read or forge what the agent writes.
	ControlDir string
	// ClosurePaths are /nix/store paths bound read-only; EnvPath is the
	// step's buildEnv (one of them), whose bin/sh and bin/env become /bin/sh
	// and /usr/bin/env. Both empty: the host's /usr, /bin, /sbin and /lib*
	// are bound read-only instead.
	ClosurePaths []string
	EnvPath      string
	// TmpBytes sizes the /tmp tmpfs; 0 leaves the kernel's default (half of
	// RAM), which the step's memory limit still bounds.
	TmpBytes int64
	// Console receives the init's stdout and stderr: the job's output, line
	// by line. Nil discards it.
	Console io.Writer
	// CgroupFD, when positive, is an open cgroup v2 directory the child is
	// cloned into (SysProcAttr.UseCgroupFD); with cgroup v1 leave it 0 and
	// place the held child with its Pid before Release.
	CgroupFD int
	// InitPath is the binary started as the jail's init; empty means the
	// agent, found by AgentPath. Any binary whose main calls
	// jailinit.MaybeInit first will do. A small one starts faster: every Go
	// package init of the binary runs before MaybeInit can take over.
	InitPath string

	// Rlimits bound the job (or, in exec mode, the program); zero fields
	// take the defaults (see Rlimits).
	Rlimits jailwire.Rlimits
	// Seccomp is the system call filter installed before the job or the
	// program runs; nil means seccomp.Default(). NoSeccomp leaves it out:
	// it exists so that benchmarks can measure the filter's cost, and no
	// backend sets it.
	Seccomp   *seccomp.Profile
	NoSeccomp bool

	// Exec, when set, puts the jail in exec mode: instead of running a job
	// with the guest agent, the init runs Exec.Argv as an unprivileged
	// child (a hypervisor) and exits with its status. Workspace and
	// ControlDir must then be empty; Exec.Writable replaces them.
	Exec *jailwire.ExecSpec

	// initFiles are the init binary's loader and libraries when it is
	// dynamically linked (see runtimeFiles); Start fills them in.
	initFiles []string
}

// HostFS is what Plan looks at on the host; OSFS is the real one.
type HostFS interface {
	Lstat(name string) (fs.FileInfo, error)
	Readlink(name string) (string, error)
}

type osFS struct{}

func (osFS) Lstat(name string) (fs.FileInfo, error) { return os.Lstat(name) }
func (osFS) Readlink(name string) (string, error)   { return os.Readlink(name) }

// OSFS is the host's file system.
var OSFS HostFS = osFS{}

// hostRootDirs are bound from the host when the step has no Nix closure.
var hostRootDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// hostEtcBinds are taken from the host's /etc when they exist: the dynamic
// linker's cache and Debian's alternatives symlinks (/usr/bin/awk points
// through them).
var hostEtcBinds = []string{"/etc/ld.so.cache", "/etc/alternatives"}

// devices are bound from the host's /dev. /dev/tty is not: it would be
// the caller's terminal, and the jail runs in a session of its own with no
// controlling terminal.
var devices = []string{"null", "zero", "full", "random", "urandom"}

// HypervisorDevices are made in an exec-mode jail's /dev, owned by the
// program's uid, when the host has them: KVM, taps, vhost-net and vsock.
var HypervisorDevices = []string{"/dev/kvm", "/dev/net/tun", "/dev/vhost-net", "/dev/vhost-vsock"}

// maskedPaths and readonlyPaths are runc's defaults for /proc.
var (
	maskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/sched_debug", "/proc/scsi", "/proc/timer_list",
		"/proc/timer_stats",
	}
	readonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// Generated /etc files: root and nobody only, files-only name service, no
// resolver unless the step has egress (Config.ResolvConf).
const (
	etcPasswd   = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	etcGroup    = "root:x:0:\nnogroup:x:65534:\n"
	etcHosts    = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	etcNsswitch = "passwd: files\ngroup: files\nshadow: files\nhosts: files\nnetworks: files\nprotocols: files\nservices: files\n"
)

// Plan lists the steps that build the jail's root from cfg, in order. It is
// pure apart from looking at the host through host, so tests compare it
// with a golden file.
func Plan(cfg Config, host HostFS) ([]jailwire.Mount, error) {
	if cfg.Exec != nil {
		return execPlan(cfg, host)
	}
	if cfg.Workspace == "" || !filepath.IsAbs(cfg.Workspace) {
		return nil, fmt.Errorf("jail plan: workspace %q must be an absolute path", cfg.Workspace)
	}
	if cfg.ControlDir == "" || !filepath.IsAbs(cfg.ControlDir) {
		return nil, fmt.Errorf("jail plan: control dir %q must be an absolute path", cfg.ControlDir)
	}
	var p []jailwire.Mount
	add := func(m ...jailwire.Mount) { p = append(p, m...) }

	if len(cfg.ClosurePaths) == 0 {
		if cfg.EnvPath != "" {
			return nil, fmt.Errorf("jail plan: env path %s given without its closure paths", cfg.EnvPath)
		}
		ms, err := hostRoot(host)
		if err != nil {
			return nil, err
		}
		add(ms...)
	} else {
		ms, err := closureRoot(cfg.ClosurePaths, cfg.EnvPath, host)
		if err != nil {
			return nil, err
		}
		add(ms...)
		// A dynamically linked init needs its loader to re-execute itself.
		for _, f := range cfg.initFiles {
			add(jailwire.Mount{Op: jailwire.OpBind, Source: f, Target: f, ReadOnly: true, Flags: "nosuid,nodev"})
		}
	}

	add(etc(cfg, host, len(cfg.ClosurePaths) == 0)...)
	add(jailwire.Mount{Op: jailwire.OpDir, Target: "/root", Mode: 0o700},
		jailwire.Mount{Op: jailwire.OpBind, Source: cfg.Workspace, Target: guest.WorkspaceMount, Flags: "nosuid,nodev"},
		jailwire.Mount{Op: jailwire.OpDir, Target: "/run", Mode: 0o755},
		jailwire.Mount{Op: jailwire.OpBind, Source: cfg.ControlDir, Target: guest.ControlMount, Flags: "nosuid,nodev,noexec"})
	add(tmp(cfg.TmpBytes))
	add(dev()...)
	add(proc()...)
	return p, nil
}

// execPlan is the root of an exec-mode jail: the host's /usr, /bin, /lib*
// (a hypervisor from the host, such as Debian's qemu, and its firmware
// under /usr/share) plus the closure's store paths, the generated /etc, the
// writable and read-only directories at their own paths, and a /dev that
// also holds the hypervisor's device nodes, owned by its uid.
func execPlan(cfg Config, host HostFS) ([]jailwire.Mount, error) {
	x := cfg.Exec
	switch {
	case cfg.Workspace != "" || cfg.ControlDir != "":
		return nil, errors.New("jail plan: exec mode takes no workspace or control dir (bind them with Exec.Writable)")
	case cfg.EnvPath != "":
		return nil, errors.New("jail plan: exec mode takes no env path")
	case len(x.Argv) == 0 || !filepath.IsAbs(x.Argv[0]):
		return nil, fmt.Errorf("jail plan: exec argv %q must start with an absolute path", x.Argv)
	case x.UID <= 0 || x.GID <= 0:
		return nil, fmt.Errorf("jail plan: exec uid %d and gid %d must be unprivileged (non-zero)", x.UID, x.GID)
	}
	for _, d := range append(append([]string(nil), x.Writable...), x.ReadOnly...) {
		if !filepath.IsAbs(d) || filepath.Clean(d) != d {
			return nil, fmt.Errorf("jail plan: bind %q must be a clean absolute path", d)
		}
		for _, own := range []string{"/", "/dev", "/proc", "/sys", "/etc", "/tmp", "/usr", "/nix/store"} {
			under := own == "/dev" || own == "/proc" || own == "/sys"
			if d == own || (under && strings.HasPrefix(d, own+"/")) {
				return nil, fmt.Errorf("jail plan: bind %q would cover the jail's own %s", d, own)
			}
		}
	}
	inWritable := false
	for _, w := range x.Writable {
		if x.Dir == w || strings.HasPrefix(x.Dir, w+"/") {
			inWritable = true
		}
	}
	if !inWritable {
		return nil, fmt.Errorf("jail plan: exec working directory %q is not in a writable bind %q", x.Dir, x.Writable)
	}

	var p []jailwire.Mount
	add := func(m ...jailwire.Mount) { p = append(p, m...) }
	ms, err := hostRoot(host)
	if err != nil {
		return nil, err
	}
	add(ms...)
	if len(cfg.ClosurePaths) > 0 {
		ms, err := closureRoot(cfg.ClosurePaths, "", host)
		if err != nil {
			return nil, err
		}
		add(ms...)
	}
	add(etc(cfg, host, true)...)
	add(tmp(cfg.TmpBytes))
	for _, d := range x.ReadOnly {
		add(jailwire.Mount{Op: jailwire.OpBind, Source: d, Target: d, ReadOnly: true, Flags: "nosuid,nodev"})
	}
	for _, d := range x.Writable {
		add(jailwire.Mount{Op: jailwire.OpBind, Source: d, Target: d, Flags: "nosuid,nodev"})
	}
	add(dev()...)
	for _, d := range HypervisorDevices {
		fi, err := host.Lstat(d)
		if err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
			continue
		}
		add(jailwire.Mount{Op: jailwire.OpDevice, Source: d, Target: d, Mode: 0o600, UID: x.UID, GID: x.GID})
	}
	add(proc()...)
	return p, nil
}

// etc is the generated /etc, plus the host's linker cache and alternatives
// when the root has the host's /usr.
func etc(cfg Config, host HostFS, hostUsr bool) []jailwire.Mount {
	p := []jailwire.Mount{{Op: jailwire.OpDir, Target: "/etc", Mode: 0o755},
		{Op: jailwire.OpFile, Target: "/etc/passwd", Data: etcPasswd, Mode: 0o644},
		{Op: jailwire.OpFile, Target: "/etc/group", Data: etcGroup, Mode: 0o644},
		{Op: jailwire.OpFile, Target: "/etc/hosts", Data: etcHosts, Mode: 0o644},
		{Op: jailwire.OpFile, Target: "/etc/hostname", Data: cfg.Hostname + "\n", Mode: 0o644},
		{Op: jailwire.OpFile, Target: "/etc/nsswitch.conf", Data: etcNsswitch, Mode: 0o644}}
	if cfg.ResolvConf != "" {
		p[len(p)-1].Data = strings.Replace(etcNsswitch, "hosts: files\n", "hosts: files dns\n", 1)
		p = append(p, jailwire.Mount{Op: jailwire.OpFile, Target: "/etc/resolv.conf", Data: cfg.ResolvConf, Mode: 0o644})
	}
	if hostUsr {
		for _, e := range hostEtcBinds {
			if _, err := host.Lstat(e); err == nil {
				p = append(p, jailwire.Mount{Op: jailwire.OpBind, Source: e, Target: e, ReadOnly: true, Flags: "nosuid,nodev"})
			}
		}
	}
	return p
}

func tmp(size int64) jailwire.Mount {
	data := "mode=1777"
	if size > 0 {
		data += fmt.Sprintf(",size=%d", size)
	}
	return jailwire.Mount{Op: jailwire.OpTmpfs, Target: "/tmp", Data: data, Flags: "nosuid,nodev"}
}

// dev is the minimal /dev. It is not nodev: an exec-mode jail makes its
// device nodes in it.
func dev() []jailwire.Mount {
	p := []jailwire.Mount{{Op: jailwire.OpTmpfs, Target: "/dev", Data: "mode=755,size=65536", Flags: "nosuid,noexec"}}
	for _, d := range devices {
		p = append(p, jailwire.Mount{Op: jailwire.OpBind, Source: "/dev/" + d, Target: "/dev/" + d, Flags: "nosuid,noexec"})
	}
	return append(p,
		jailwire.Mount{Op: jailwire.OpDevpts, Target: "/dev/pts", Data: "newinstance,ptmxmode=0666,mode=0620", Flags: "nosuid,noexec"},
		jailwire.Mount{Op: jailwire.OpSymlink, Source: "pts/ptmx", Target: "/dev/ptmx"},
		jailwire.Mount{Op: jailwire.OpTmpfs, Target: "/dev/shm", Data: "mode=1777", Flags: "nosuid,nodev,noexec"},
		jailwire.Mount{Op: jailwire.OpSymlink, Source: "/proc/self/fd", Target: "/dev/fd"},
		jailwire.Mount{Op: jailwire.OpSymlink, Source: "/proc/self/fd/0", Target: "/dev/stdin"},
		jailwire.Mount{Op: jailwire.OpSymlink, Source: "/proc/self/fd/1", Target: "/dev/stdout"},
		jailwire.Mount{Op: jailwire.OpSymlink, Source: "/proc/self/fd/2", Target: "/dev/stderr"})
}

// proc is a fresh /proc with runc's masked and read-only paths.
func proc() []jailwire.Mount {
	p := []jailwire.Mount{{Op: jailwire.OpProc, Target: "/proc", Flags: "nosuid,nodev,noexec"}}
	for _, m := range maskedPaths {
		p = append(p, jailwire.Mount{Op: jailwire.OpMask, Target: m})
	}
	for _, r := range readonlyPaths {
		p = append(p, jailwire.Mount{Op: jailwire.OpRdonly, Target: r})
	}
	return p
}

// hostRoot binds the host's system directories. A usr-merge symlink such as
// /bin -> usr/bin stays a symlink when it points into a directory that is
// bound anyway; any other symlinked directory is bound at its own name.
func hostRoot(host HostFS) ([]jailwire.Mount, error) {
	var p []jailwire.Mount
	var links []jailwire.Mount
	bound := map[string]bool{}
	for _, d := range hostRootDirs {
		fi, err := host.Lstat(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("jail plan: %w", err)
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := host.Readlink(d)
			if err != nil {
				return nil, fmt.Errorf("jail plan: %w", err)
			}
			links = append(links, jailwire.Mount{Op: jailwire.OpSymlink, Source: target, Target: d})
		case fi.IsDir():
			p = append(p, jailwire.Mount{Op: jailwire.OpBind, Source: d, Target: d, ReadOnly: true, Flags: "nosuid,nodev"})
			bound[d] = true
		}
	}
	if !bound["/usr"] {
		return nil, errors.New("jail plan: the host has no /usr directory to bind; give the step a Nix closure instead")
	}
	for _, l := range links {
		abs := l.Source
		if !path.IsAbs(abs) {
			abs = path.Join(path.Dir(l.Target), abs)
		}
		abs = path.Clean(abs)
		if under(abs, bound) {
			p = append(p, l)
			continue
		}
		// A symlink out of the bound set: bind what it points to at its name.
		fi, err := host.Lstat(abs)
		if err != nil || !fi.IsDir() {
			continue // dangling or not a directory: leave it out
		}
		p = append(p, jailwire.Mount{Op: jailwire.OpBind, Source: abs, Target: l.Target, ReadOnly: true, Flags: "nosuid,nodev"})
	}
	return p, nil
}

func under(p string, dirs map[string]bool) bool {
	for d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// closureRoot binds the store paths and links /bin/sh and /usr/bin/env to
// the environment's, when it has them.
func closureRoot(paths []string, env string, host HostFS) ([]jailwire.Mount, error) {
	sorted := append([]string(nil), paths...)
	sort.Strings(sorted)
	p := []jailwire.Mount{{Op: jailwire.OpDir, Target: "/nix/store", Mode: 0o755}}
	hasEnv := false
	for i, sp := range sorted {
		if i > 0 && sorted[i-1] == sp {
			continue
		}
		if !strings.HasPrefix(sp, "/nix/store/") || path.Clean(sp) != sp || strings.Count(sp, "/") != 3 {
			return nil, fmt.Errorf("jail plan: closure path %q is not a /nix/store/<hash>-<name> path", sp)
		}
		if sp == env {
			hasEnv = true
		}
		p = append(p, jailwire.Mount{Op: jailwire.OpBind, Source: sp, Target: sp, ReadOnly: true, Flags: "nosuid,nodev"})
	}
	if env == "" {
		return p, nil
	}
	if !hasEnv {
		return nil, fmt.Errorf("jail plan: env path %s is not one of the closure paths", env)
	}
	p = append(p, jailwire.Mount{Op: jailwire.OpDir, Target: "/bin", Mode: 0o755}, jailwire.Mount{Op: jailwire.OpDir, Target: "/usr/bin", Mode: 0o755})
	for _, l := range []struct{ name, link string }{{"sh", "/bin/sh"}, {"env", "/usr/bin/env"}} {
		if _, err := host.Lstat(env + "/bin/" + l.name); err == nil {
			p = append(p, jailwire.Mount{Op: jailwire.OpSymlink, Source: env + "/bin/" + l.name, Target: l.link})
		}
	}
	return p, nil
}
