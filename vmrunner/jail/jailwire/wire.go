// Package jailwire is what the two sides of a jail share: the hidden
// argument and the environment that start the init, the configuration the
// parent sends it over a pipe (ChildConfig: the root's Mounts, the
// Rlimits, an ExecSpec, the compiled seccomp filter), the messages it sends
// back (its Hello first) and the version handshake (OurHello, Check,
// BuildID). The parent is vmrunner/jail, the init vmrunner/jail/jailinit.
//
// It is a leaf: it imports the standard library, golang.org/x/sys/unix and
// the project's guest and vmrunner/seccomp/compiled packages only, since
// the init, and so the static agent that links it, imports it too.
// vmrunner/jail and its callers name these types here.
package jailwire

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/agentsandbox/agentsandbox/guest"
)

// InitArg is the hidden first argument that makes the agent binary the
// jail's init.
const InitArg = "__agentsandbox_init"

// InitProtocol numbers the protocol between jail.Start and the init: the
// arguments, the _AGENTSANDBOX_* variables, the descriptors, the config
// JSON and the messages back. Bump it with any change to them; the init
// says its number in its hello and jail.Process.Release refuses any other.
const InitProtocol = 1

// InitThreads is how many OS threads the init (a Go program, PID 1 of the
// jail) starts and keeps before it runs the job. pids.max counts threads,
// and the job shares the init's cgroup: an init that asked the kernel for
// a thread only once a fork bomb held every pid would die of it, and take
// the step's result with it. The host adds at least this much to a step's
// pids limit (vmrunner/namespace.InitPIDs).
const InitThreads = 12

// Environment variables that carry descriptor numbers and the stage to the
// init and to its re-executed stage 2.
const (
	EnvConfigFD = "_AGENTSANDBOX_CONFIG_FD" // read end: the parent's config (its arrival is the "go")
	EnvStatusFD = "_AGENTSANDBOX_STATUS_FD" // write end: ready/error messages to the parent
	EnvNetnsFD  = "_AGENTSANDBOX_NETNS_FD"  // the network namespace to join
	EnvStage    = "_AGENTSANDBOX_INIT_STAGE"
	EnvExec     = "_AGENTSANDBOX_EXEC" // exec mode: the ExecSpec as JSON, for stage 2
)

// Message is what the init reports back, one JSON object per message. The
// first is always its Hello, sent before it reads the config.
type Message struct {
	Hello *Hello `json:"hello,omitempty"`
	Ready bool   `json:"ready,omitempty"`
	Error string `json:"error,omitempty"`
}

// Hello is the init's half of the version handshake.
type Hello struct {
	// Protocol is the init's InitProtocol, Job its guest.ProtocolVersion.
	Protocol int `json:"protocol"`
	Job      int `json:"job"`
	// Build is the init's BuildID ("" when it has none).
	Build string `json:"build,omitempty"`
}

// OurHello is this binary's hello.
func OurHello() Hello {
	return Hello{Protocol: InitProtocol, Job: guest.ProtocolVersion, Build: BuildID()}
}

// Check says why an init that sent h cannot serve this binary, or nil.
// The build ids are compared only when both are known (see BuildID).
func (h Hello) Check() error {
	our := OurHello()
	switch {
	case h.Protocol != our.Protocol:
		return fmt.Errorf("it speaks jail protocol %d, this agentsandbox speaks %d", h.Protocol, our.Protocol)
	case h.Job != our.Job:
		return fmt.Errorf("it speaks job protocol %d, this agentsandbox speaks %d", h.Job, our.Job)
	case h.Build != "" && our.Build != "" && h.Build != our.Build:
		return fmt.Errorf("it was built from %s, this agentsandbox from %s", h.Build, our.Build)
	}
	return nil
}

// BuildID identifies the source a binary was built from: its VCS revision
// when it was built by the go command from a clean checkout, else "" (a
// modified tree, a test binary, a Nix build without .git, whose CLI and
// agent come from one derivation). The handshake compares build ids only
// when both sides have one.
func BuildID() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			return ""
		}
	}
	return rev
}

// Rlimits are the resource limits the init sets on itself before it runs
// the job or the program, which inherit them. RLIMIT_CORE is always 0: a
// crashing job leaves no core file.
type Rlimits struct {
	// NoFileSoft and NoFileHard bound open descriptors; 0 takes
	// DefaultNoFileSoft and DefaultNoFileHard.
	NoFileSoft, NoFileHard uint64
	// FSize bounds the size of any one file the job writes (RLIMIT_FSIZE),
	// such as the step's disk size; 0 leaves it unlimited.
	FSize uint64
}

// Default descriptor limits: the usual soft limit, and a hard limit a job
// may raise its soft limit to.
const (
	DefaultNoFileSoft = 1024
	DefaultNoFileHard = 4096
)

// WithDefaults fills in the defaults and keeps soft <= hard.
func (r Rlimits) WithDefaults() Rlimits {
	if r.NoFileHard == 0 {
		r.NoFileHard = max(DefaultNoFileHard, r.NoFileSoft)
	}
	if r.NoFileSoft == 0 {
		r.NoFileSoft = min(DefaultNoFileSoft, r.NoFileHard)
	}
	r.NoFileSoft = min(r.NoFileSoft, r.NoFileHard)
	return r
}

// ExecSpec is what the jail runs in exec mode, the way Firecracker's
// jailer runs Firecracker: a program from the host's /usr (or from
// ClosurePaths) in a root of read-only binds, its device nodes made for it,
// as UID/GID with no capabilities and no_new_privs.
type ExecSpec struct {
	// Argv is the program and its arguments; Argv[0] is an absolute path
	// inside the jail (host and closure paths keep their names).
	Argv []string
	// Env is the program's whole environment.
	Env []string
	// Dir is the program's working directory; it must be one of Writable
	// or below one.
	Dir string
	// UID and GID run the program; both must be non-zero. The device
	// nodes (HypervisorDevices) are made owned by them, mode 0600.
	UID, GID int
	// Writable are host directories bound read-write at their own paths
	// (nosuid, nodev), such as a VM's working directory and the share
	// sources its symlinks point to.
	Writable []string
	// ReadOnly are host paths bound read-only at their own paths (a runner
	// directory outside the Nix store).
	ReadOnly []string
}

// Op is the kind of one Mount.
type Op string

// The operations a jail.Plan is made of. Targets are paths inside the new root.
const (
	OpDir     Op = "dir"     // mkdir Target with Mode
	OpFile    Op = "file"    // write Data to Target with Mode
	OpSymlink Op = "symlink" // symlink Target -> Source
	OpBind    Op = "bind"    // bind Source (file or directory) on Target; ReadOnly remounts it read-only
	OpTmpfs   Op = "tmpfs"   // tmpfs on Target with Data as options
	OpProc    Op = "proc"    // a fresh proc on Target
	OpDevpts  Op = "devpts"  // a new devpts instance on Target
	OpMask    Op = "mask"    // hide Target if it exists: /dev/null over a file, an empty read-only tmpfs over a directory
	OpRdonly  Op = "rdonly"  // remount Target read-only if it exists
	OpDevice  Op = "device"  // mknod Target as the character device Source is, with Mode, owned by UID:GID
)

// Mount is one step of building the root. Flags are mount flag names
// ("nosuid", "nodev", "noexec").
type Mount struct {
	Op       Op     `json:"op"`
	Source   string `json:"source,omitempty"`
	Target   string `json:"target"`
	Data     string `json:"data,omitempty"`
	Flags    string `json:"flags,omitempty"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	Mode     uint32 `json:"mode,omitempty"`
	UID      int    `json:"uid,omitempty"`
	GID      int    `json:"gid,omitempty"`
}

// String renders the step on one line, for golden files and errors.
func (m Mount) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-7s %s", m.Op, m.Target)
	if m.Source != "" {
		fmt.Fprintf(&b, " <- %s", m.Source)
	}
	if m.ReadOnly {
		b.WriteString(" ro")
	}
	if m.Flags != "" {
		b.WriteString(" " + m.Flags)
	}
	if m.Mode != 0 {
		fmt.Fprintf(&b, " mode=%04o", m.Mode)
	}
	if m.UID != 0 || m.GID != 0 {
		fmt.Fprintf(&b, " owner=%d:%d", m.UID, m.GID)
	}
	if m.Data != "" && m.Op != OpFile {
		fmt.Fprintf(&b, " data=%s", m.Data)
	}
	if m.Op == OpFile {
		fmt.Fprintf(&b, " (%d bytes)", len(m.Data))
	}
	return b.String()
}
