// Package seccomp is the system call filter every jail installs before it
// runs a job (or, in exec mode, a hypervisor): Docker's default profile, as
// github.com/moby/profiles/seccomp holds it, seen as a container with no
// capabilities on this machine's architecture, and compiled to BPF without
// cgo by github.com/elastic/go-seccomp-bpf.
//
// Default derives the Profile: every rule of Docker's profile whose
// conditions hold for a process with no capabilities on runtime.GOARCH,
// keeping Docker's argument filters (clone without namespace flags, the
// socket families Docker allows, the personality values it allows) and
// returning ENOSYS for clone3 so that libc falls back to clone, whose flags
// the filter can see. Every other call fails with EPERM. Names the
// architecture does not have (32-bit variants such as chown32) are dropped,
// as libseccomp drops them; 32-bit and x32 system calls of an x86_64
// process are refused whole.
//
// Refused lists what the profile must never allow; Default checks it, and
// Relax (a step's policy-granted exceptions) may only add calls from
// Relaxable. A Profile's Digest is the sha256 of its canonical text (the
// sorted rules and the default action), so the execution record names the
// exact filter a step ran under.
//
// Install loads a Profile into the calling process with TSYNC, so that every
// thread of a Go program gets it, and sets no_new_privs, which seccomp
// needs for an unprivileged caller anyway. The filter is inherited across
// fork and exec and can never be removed.
package seccomp

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	bpf "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	moby "github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Action is what the filter does with a matching call.
type Action string

// The actions a Profile uses. The default for calls no rule matches is
// always ActErrno (EPERM), as in Docker's profile.
const (
	ActAllow  Action = "allow"
	ActErrno  Action = "errno"  // fail with EPERM
	ActENOSYS Action = "enosys" // fail with ENOSYS: "not implemented", so callers fall back
)

// Op compares one argument of a call.
type Op string

// The argument comparisons Docker's profile uses.
const (
	OpEqual      Op = "eq"        // arg == Value
	OpLessThan   Op = "lt"        // arg < Value
	OpMaskedZero Op = "mask-zero" // arg & Value == 0 (none of the bits in Value set)
)

// Arg is a condition on argument Index (0-5).
type Arg struct {
	Index uint32 `json:"index"`
	Op    Op     `json:"op"`
	Value uint64 `json:"value"`
}

// Rule applies Action to calls of Name whose arguments satisfy all of Args.
// Several rules for one name match when any of them does.
type Rule struct {
	Name   string `json:"name"`
	Action Action `json:"action"`
	Args   []Arg  `json:"args,omitempty"`
}

func (r Rule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Action, r.Name)
	for _, a := range r.Args {
		fmt.Fprintf(&b, " arg%d %s %#x", a.Index, a.Op, a.Value)
	}
	return b.String()
}

// Profile is a compiled-ready filter for one architecture.
type Profile struct {
	// Arch is the architecture's name as go-seccomp-bpf knows it (x86_64).
	Arch string
	// Rules are sorted by name, then by their text; a name appears either
	// once without Args or only in rules with Args.
	Rules []Rule
	// Relaxed are the calls Relax added, sorted.
	Relaxed []string
}

// Refused are the calls the default profile must never allow at all, the
// classes issue 11 lists: namespaces, keyrings, io_uring, perf, userfaultfd,
// bpf, the mount family, file handles, kexec and kernel modules. clone and
// clone3 are refused in their namespace-making forms only (see Default).
var Refused = []string{
	"unshare", "setns",
	"keyctl", "add_key", "request_key",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"perf_event_open", "userfaultfd", "bpf",
	"mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsmount", "fspick", "fsconfig", "mount_setattr",
	"open_by_handle_at",
	"kexec_load", "kexec_file_load",
	"init_module", "finit_module", "delete_module",
}

// Relaxable are the calls a step may be granted on top of the default
// (policy data agentsandbox.seccomp.allow; see docs/policy.md). They let a
// job look at itself (perf, io_uring, userfaultfd) or use its own keyring;
// none of them changes the jail's namespaces, mounts or kernel.
var Relaxable = []string{
	"perf_event_open",
	"userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"keyctl", "add_key", "request_key",
}

// goarchNames maps GOARCH to the names Docker's profile and go-seccomp-bpf use.
var goarchNames = map[string]struct{ docker, bpf string }{
	"amd64": {"amd64", "x86_64"},
	"arm64": {"arm64", "aarch64"},
}

// namespaceFlags are the clone flags that make namespaces.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

// Default is Docker's default profile for a process without capabilities
// on this machine's architecture; see the package documentation.
func Default() (*Profile, error) {
	p, err := derivedDefault()
	if err != nil {
		return nil, err
	}
	return p.clone(), nil
}

var derivedDefault = sync.OnceValues(func() (*Profile, error) {
	names, ok := goarchNames[runtime.GOARCH]
	if !ok {
		return nil, fmt.Errorf("seccomp: no default profile for %s", runtime.GOARCH)
	}
	return fromDocker(moby.DefaultProfile(), names.docker, names.bpf)
})

// clone is a deep copy of p.
func (p *Profile) clone() *Profile {
	q := &Profile{Arch: p.Arch, Rules: slices.Clone(p.Rules), Relaxed: slices.Clone(p.Relaxed)}
	for i := range q.Rules {
		q.Rules[i].Args = slices.Clone(q.Rules[i].Args)
	}
	return q
}

// fromDocker is the no-capability view of a Docker profile for one arch.
func fromDocker(src *moby.Seccomp, dockerArch, bpfArch string) (*Profile, error) {
	info, err := arch.GetInfo(bpfArch)
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	if src.DefaultAction != specs.ActErrno || src.DefaultErrnoRet == nil || *src.DefaultErrnoRet != uint(unix.EPERM) {
		return nil, fmt.Errorf("seccomp: Docker's profile has default action %s, want errno EPERM", src.DefaultAction)
	}
	p := &Profile{Arch: info.Name}
	for _, sc := range src.Syscalls {
		if !applies(sc, dockerArch) {
			continue
		}
		var action Action
		switch {
		case sc.Action == specs.ActAllow:
			action = ActAllow
		case sc.Action == specs.ActErrno && sc.ErrnoRet != nil && *sc.ErrnoRet == uint(unix.ENOSYS):
			action = ActENOSYS
		case sc.Action == specs.ActErrno && (sc.ErrnoRet == nil || *sc.ErrnoRet == uint(unix.EPERM)):
			continue // what the default does anyway
		default:
			return nil, fmt.Errorf("seccomp: Docker's profile rule for %v has action %s, which this filter cannot express", sc.Names, sc.Action)
		}
		args, err := convertArgs(sc.Args)
		if err != nil {
			return nil, fmt.Errorf("seccomp: rule for %v: %w", sc.Names, err)
		}
		all := append(slices.Clone(sc.Names), sc.Name)
		for _, n := range all {
			if n == "" {
				continue
			}
			if _, ok := info.SyscallNames[n]; !ok {
				continue // another ABI's name, such as chown32
			}
			p.Rules = append(p.Rules, Rule{Name: n, Action: action, Args: args})
		}
	}
	if err := p.normalize(); err != nil {
		return nil, err
	}
	if err := p.checkRefused(nil); err != nil {
		return nil, err
	}
	return p, nil
}

// applies reports whether a rule holds for a process with no capabilities
// on dockerArch. MinKernel conditions are taken as met: the oldest one
// Docker's profile names (4.8) is far older than any kernel this runs on.
func applies(sc *moby.Syscall, dockerArch string) bool {
	if in := sc.Includes; in != nil {
		if len(in.Caps) > 0 {
			return false
		}
		if len(in.Arches) > 0 && !slices.Contains(in.Arches, dockerArch) {
			return false
		}
	}
	if ex := sc.Excludes; ex != nil {
		// Excludes.Caps: we hold none, so never excluded for caps.
		if slices.Contains(ex.Arches, dockerArch) {
			return false
		}
		if ex.MinKernel != nil {
			return false // excluded on every kernel newer than that
		}
	}
	return true
}

func convertArgs(in []specs.LinuxSeccompArg) ([]Arg, error) {
	var out []Arg
	for _, a := range in {
		if a.Index > 5 {
			return nil, fmt.Errorf("argument index %d", a.Index)
		}
		switch {
		case a.Op == specs.OpEqualTo:
			out = append(out, Arg{Index: uint32(a.Index), Op: OpEqual, Value: a.Value})
		case a.Op == specs.OpLessThan:
			out = append(out, Arg{Index: uint32(a.Index), Op: OpLessThan, Value: a.Value})
		case a.Op == specs.OpMaskedEqual && a.ValueTwo == 0:
			out = append(out, Arg{Index: uint32(a.Index), Op: OpMaskedZero, Value: a.Value})
		default:
			return nil, fmt.Errorf("argument comparison %s (value %#x, %#x) is not supported", a.Op, a.Value, a.ValueTwo)
		}
	}
	return out, nil
}

// normalize sorts the rules, drops duplicates and conditional rules that an
// unconditional rule for the same name and action covers, and refuses a
// name that has rules with different actions.
func (p *Profile) normalize() error {
	uncond := map[string]bool{}
	actions := map[string]Action{}
	for _, r := range p.Rules {
		if a, ok := actions[r.Name]; ok && a != r.Action {
			return fmt.Errorf("seccomp: %s has rules with actions %s and %s", r.Name, a, r.Action)
		}
		actions[r.Name] = r.Action
		if len(r.Args) == 0 {
			uncond[r.Name] = true
		}
	}
	var rules []Rule
	seen := map[string]bool{}
	for _, r := range p.Rules {
		if len(r.Args) > 0 && uncond[r.Name] {
			continue
		}
		if k := r.String(); !seen[k] {
			seen[k] = true
			rules = append(rules, r)
		}
	}
	sort.Slice(rules, func(i, j int) bool {
		if rules[i].Name != rules[j].Name {
			return rules[i].Name < rules[j].Name
		}
		return rules[i].String() < rules[j].String()
	})
	p.Rules = rules
	return nil
}

// checkRefused fails when a rule allows a call of Refused (except those in
// granted), or clone without the namespace-flag mask.
func (p *Profile) checkRefused(granted []string) error {
	for _, r := range p.Rules {
		if r.Action != ActAllow {
			continue
		}
		if slices.Contains(Refused, r.Name) && !slices.Contains(granted, r.Name) {
			return fmt.Errorf("seccomp: the profile allows %s, which the jail must refuse", r.Name)
		}
		if r.Name == "clone" || r.Name == "clone3" {
			masked := false
			for _, a := range r.Args {
				if a.Op == OpMaskedZero && a.Value&namespaceFlags == namespaceFlags {
					masked = true
				}
			}
			if !masked {
				return fmt.Errorf("seccomp: the profile allows %s without refusing its namespace flags", r.Name)
			}
		}
	}
	return nil
}

// ErrNotRelaxable is what Relax returns (wrapped) for a call outside
// Relaxable: a mistake in policy data, not in the host.
var ErrNotRelaxable = errors.New("cannot be allowed for a step")

// Relax returns a copy of p that also allows names, each of which must be
// one of Relaxable. No names returns p itself.
func (p *Profile) Relax(names []string) (*Profile, error) {
	if len(names) == 0 {
		return p, nil
	}
	q := &Profile{Arch: p.Arch, Relaxed: slices.Clone(p.Relaxed)}
	add := map[string]bool{}
	for _, n := range names {
		if !slices.Contains(Relaxable, n) {
			return nil, fmt.Errorf("seccomp: %q %w; relaxable calls are %s", n, ErrNotRelaxable, strings.Join(Relaxable, ", "))
		}
		add[n] = true
	}
	for _, r := range p.Rules {
		if !add[r.Name] {
			q.Rules = append(q.Rules, r)
		}
	}
	for n := range add {
		q.Rules = append(q.Rules, Rule{Name: n, Action: ActAllow})
		if !slices.Contains(q.Relaxed, n) {
			q.Relaxed = append(q.Relaxed, n)
		}
	}
	sort.Strings(q.Relaxed)
	if err := q.normalize(); err != nil {
		return nil, err
	}
	if err := q.checkRefused(q.Relaxed); err != nil {
		return nil, err
	}
	return q, nil
}

// Allows reports whether some rule allows name (possibly only with
// arguments that match its conditions).
func (p *Profile) Allows(name string) bool {
	for _, r := range p.Rules {
		if r.Name == name && r.Action == ActAllow {
			return true
		}
	}
	return false
}

// Text is the canonical text of the profile, the bytes Digest is taken
// over: a header, the architecture, the default action and one line per
// rule in order.
func (p *Profile) Text() string {
	var b strings.Builder
	b.WriteString("agentsandbox seccomp profile v1\n")
	fmt.Fprintf(&b, "arch %s\n", p.Arch)
	b.WriteString("default errno EPERM\n")
	for _, r := range p.Rules {
		b.WriteString(r.String() + "\n")
	}
	return b.String()
}

// Digest is the sha256 of Text.
func (p *Profile) Digest() [32]byte { return sha256.Sum256([]byte(p.Text())) }

// DigestString is Digest spelled "sha256:<hex>", as the record spells digests.
func (p *Profile) DigestString() string {
	d := p.Digest()
	return "sha256:" + hex.EncodeToString(d[:])
}

// hotCalls lead the compiled filter (see Policy).
var hotCalls = []string{
	"futex", "read", "write", "epoll_pwait", "nanosleep", "rt_sigprocmask", "rt_sigreturn",
	"sched_yield", "mmap", "munmap", "madvise", "close", "openat", "newfstatat", "fstat",
	"fcntl", "getpid", "gettid", "tgkill", "wait4", "brk", "rt_sigaction", "mprotect",
}

// errnoENOSYS is SECCOMP_RET_ERRNO with ENOSYS. go-seccomp-bpf turns its
// own ActionErrno into EPERM; any other value it returns as it is.
const errnoENOSYS = bpf.Action(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))

// Policy is the profile in go-seccomp-bpf's terms: one group per action,
// calls with conditions as NamesWithCondtions (each rule one alternative).
func (p *Profile) Policy() (*bpf.Policy, error) {
	groups := map[Action]*bpf.SyscallGroup{}
	for _, a := range []Action{ActAllow, ActENOSYS} {
		groups[a] = &bpf.SyscallGroup{}
	}
	groups[ActAllow].Action = bpf.ActionAllow
	groups[ActENOSYS].Action = errnoENOSYS
	info, err := arch.GetInfo(p.Arch)
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	// The filter compares the call's number with each rule's in turn, so
	// order matters for speed only: the calls a Go program (the init and
	// the agent) and a shell make most often first, then the rest by
	// number, lowest first (on x86_64 the old, common calls).
	rank := func(name string) int {
		if i := slices.Index(hotCalls, name); i >= 0 {
			return i
		}
		return len(hotCalls) + info.SyscallNames[name]
	}
	rules := slices.Clone(p.Rules)
	slices.SortStableFunc(rules, func(a, b Rule) int { return rank(a.Name) - rank(b.Name) })
	for _, r := range rules {
		g, ok := groups[r.Action]
		if !ok {
			return nil, fmt.Errorf("seccomp: rule %q: action %s is not compiled", r, r.Action)
		}
		if len(r.Args) == 0 {
			g.Names = append(g.Names, r.Name)
			continue
		}
		var conds bpf.ArgumentConditions
		for _, a := range r.Args {
			c := bpf.Condition{Argument: a.Index, Value: a.Value}
			switch a.Op {
			case OpEqual:
				c.Operation = bpf.Equal
			case OpLessThan:
				c.Operation = bpf.LessThan
			case OpMaskedZero:
				c.Operation = bpf.BitsNotSet
			default:
				return nil, fmt.Errorf("seccomp: rule %q: unknown comparison %s", r, a.Op)
			}
			conds = append(conds, c)
		}
		g.NamesWithCondtions = append(g.NamesWithCondtions, bpf.NameWithConditions{Name: r.Name, Conditions: conds})
	}
	pol := &bpf.Policy{DefaultAction: bpf.ActionErrno}
	// ENOSYS first: the groups do not overlap, and the short group is cheap.
	for _, a := range []Action{ActENOSYS, ActAllow} {
		if g := groups[a]; len(g.Names)+len(g.NamesWithCondtions) > 0 {
			pol.Syscalls = append(pol.Syscalls, *g)
		}
	}
	return pol, nil
}

// Filter is the go-seccomp-bpf filter Install loads: the policy, TSYNC and
// no_new_privs.
func (p *Profile) Filter() (bpf.Filter, error) {
	pol, err := p.Policy()
	if err != nil {
		return bpf.Filter{}, err
	}
	if _, err := pol.Assemble(); err != nil {
		return bpf.Filter{}, fmt.Errorf("seccomp: assemble filter: %w", err)
	}
	return bpf.Filter{NoNewPrivs: true, Flag: bpf.FilterFlagTSync, Policy: *pol}, nil
}
