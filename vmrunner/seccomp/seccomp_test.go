package seccomp

import (
	"encoding/binary"
	"encoding/json"
	"errors"

	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/elastic/go-seccomp-bpf/arch"
	netbpf "golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

var update = flag.Bool("update", false, "rewrite golden files")

func defaultProfile(t *testing.T) *Profile {
	t.Helper()
	p, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// vm runs the compiled filter on one call the way the kernel would.
type vm struct {
	t    *testing.T
	m    *netbpf.VM
	info *arch.Info
}

func newVM(t *testing.T, p *Profile) *vm {
	t.Helper()
	pol, err := p.Policy()
	if err != nil {
		t.Fatal(err)
	}
	insts, err := pol.Assemble()
	if err != nil {
		t.Fatal(err)
	}
	m, err := netbpf.NewVM(insts)
	if err != nil {
		t.Fatal(err)
	}
	info, err := arch.GetInfo(p.Arch)
	if err != nil {
		t.Fatal(err)
	}
	return &vm{t: t, m: m, info: info}
}

// run returns the filter's verdict for name(args...) from the native ABI.
func (v *vm) run(name string, args ...uint64) uint32 {
	v.t.Helper()
	nr, ok := v.info.SyscallNames[name]
	if !ok {
		v.t.Fatalf("no system call %s on %s", name, v.info.Name)
	}
	return v.runRaw(uint32(nr), uint32(v.info.ID), args...)
}

func (v *vm) runRaw(nr, auditArch uint32, args ...uint64) uint32 {
	v.t.Helper()
	// struct seccomp_data: nr, arch, instruction_pointer, args[6]. The
	// filter loads 32-bit words, and the BPF VM reads each word big-endian:
	// put every word where the filter looks for it (on a little-endian
	// machine, the low half of an argument first).
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], auditArch)
	lo, hi := 0, 4
	if binary.NativeEndian.Uint16([]byte{0, 1}) == 1 {
		lo, hi = 4, 0
	}
	for i, a := range args {
		binary.BigEndian.PutUint32(b[16+8*i+lo:], uint32(a))
		binary.BigEndian.PutUint32(b[16+8*i+hi:], uint32(a>>32))
	}
	out, err := v.m.Run(b)
	if err != nil {
		v.t.Fatal(err)
	}
	return uint32(out)
}

const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

func TestDefaultRefuses(t *testing.T) {
	p := defaultProfile(t)
	v := newVM(t, p)
	for _, name := range Refused {
		if p.Allows(name) {
			t.Errorf("the profile allows %s", name)
		}
		if got := v.run(name); got != retEPERM {
			t.Errorf("%s: filter returns %#x, want EPERM", name, got)
		}
	}
	for _, c := range []struct {
		name string
		args []uint64
		want uint32
	}{
		{"clone", []uint64{unix.CLONE_NEWUSER}, retEPERM},
		{"clone", []uint64{unix.CLONE_NEWNS | unix.CLONE_VM}, retEPERM},
		{"clone", []uint64{unix.CLONE_NEWNET}, retEPERM},
		{"clone", []uint64{unix.CLONE_NEWCGROUP}, retEPERM},
		{"clone", []uint64{unix.CLONE_VM | unix.CLONE_VFORK | unix.CLONE_PIDFD | uint64(unix.SIGCHLD)}, retAllow},
		{"clone", []uint64{unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS}, retAllow},
		{"clone3", nil, retENOSYS},
		{"socket", []uint64{unix.AF_UNIX}, retAllow},
		{"socket", []uint64{unix.AF_INET6}, retAllow},
		{"socket", []uint64{unix.AF_VSOCK}, retEPERM},
		{"personality", []uint64{0}, retAllow},
		{"personality", []uint64{0x0040000}, retEPERM}, // ADDR_NO_RANDOMIZE
		{"keyctl", []uint64{unix.KEYCTL_JOIN_SESSION_KEYRING}, retEPERM},
		{"ioctl", []uint64{0, unix.TIOCSTI}, retAllow}, // refused by having no terminal, not by the filter
		{"setuid", []uint64{65534}, retAllow},          // the agent starts the job as its uid
		{"wait4", nil, retAllow},
		{"read", nil, retAllow},
		{"ptrace", nil, retAllow}, // as in Docker since kernel 4.8: own processes only
		{"reboot", nil, retEPERM},
		{"chroot", nil, retEPERM},
		{"settimeofday", nil, retEPERM},
		{"syslog", nil, retEPERM},
	} {
		if got := v.run(c.name, c.args...); got != c.want {
			t.Errorf("%s(%#x): filter returns %#x, want %#x", c.name, c.args, got, c.want)
		}
	}
	if runtime.GOARCH == "amd64" {
		// 32-bit (int 0x80) and x32 calls never reach the rules.
		if got := v.runRaw(0, uint32(arch.I386.ID)); got != retEPERM {
			t.Errorf("i386 call: %#x, want EPERM", got)
		}
		if got := v.runRaw(0x40000000, uint32(arch.X86_64.ID)); got != retENOSYS {
			t.Errorf("x32 call: %#x, want ENOSYS", got)
		}
	}
}

func TestDigestStable(t *testing.T) {
	a, b := defaultProfile(t), defaultProfile(t)
	if a.Digest() != b.Digest() || a.Text() != b.Text() {
		t.Fatal("two default profiles differ")
	}
	if !strings.HasPrefix(a.DigestString(), "sha256:") || len(a.DigestString()) != 71 {
		t.Errorf("digest string %q", a.DigestString())
	}
	r, err := a.Relax([]string{"perf_event_open"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Digest() == a.Digest() {
		t.Error("a relaxed profile has the default's digest")
	}
	r2, _ := a.Relax([]string{"perf_event_open", "perf_event_open"})
	if r2.Digest() != r.Digest() {
		t.Error("relaxing twice by the same call changed the digest")
	}
	// The golden file shows every change of Docker's profile (a new
	// moby/profiles version) in review, and pins the digest.
	path := filepath.Join("testdata", "default-"+a.Arch+".txt")
	got := a.Text() + "digest " + a.DigestString() + "\n"
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it)", path)
	}
}

func TestRelax(t *testing.T) {
	p := defaultProfile(t)
	r, err := p.Relax([]string{"perf_event_open", "io_uring_setup"})
	if err != nil {
		t.Fatal(err)
	}
	v := newVM(t, r)
	if got := v.run("perf_event_open"); got != retAllow {
		t.Errorf("relaxed perf_event_open: %#x", got)
	}
	if got := v.run("keyctl"); got != retEPERM {
		t.Errorf("keyctl, not relaxed: %#x", got)
	}
	if !slices.Equal(r.Relaxed, []string{"io_uring_setup", "perf_event_open"}) {
		t.Errorf("Relaxed = %q", r.Relaxed)
	}
	if p.Allows("perf_event_open") {
		t.Error("Relax changed the profile it was called on")
	}
	for _, bad := range []string{"mount", "unshare", "bpf", "kexec_load", "init_module", "ptrace", "setns", "nosuchcall"} {
		if _, err := p.Relax([]string{bad}); !errors.Is(err, ErrNotRelaxable) || !strings.Contains(err.Error(), `"`+bad+`" cannot be allowed`) {
			t.Errorf("Relax(%s): %v, want a refusal", bad, err)
		}
	}
}

// TestInstall installs the filter in a child process (this test binary) and
// makes real calls there.
func TestInstall(t *testing.T) {
	if os.Getenv("SECCOMP_TEST_CHILD") == "1" {
		installChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestInstall$")
	cmd.Env = append(os.Environ(), "SECCOMP_TEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, want := range []string{"unshare-newuser: operation not permitted", "clone3: function not implemented",
		"keyctl: operation not permitted", "io_uring_setup: operation not permitted", "getpid: ok", "exec: ok"} {
		if !strings.Contains(string(out), want+"\n") {
			t.Errorf("child output lacks %q:\n%s", want, out)
		}
	}
}

func installChild() {
	p, err := Default()
	if err != nil {
		panic(err)
	}
	if err := p.Install(); err != nil {
		panic(err)
	}
	report := func(name string, err error) {
		if err == nil {
			os.Stdout.WriteString(name + ": ok\n")
			return
		}
		os.Stdout.WriteString(name + ": " + err.Error() + "\n")
	}
	report("unshare-newuser", unix.Unshare(unix.CLONE_NEWUSER))
	var args [11]uint64
	_, _, e := unix.Syscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args), 0)
	report("clone3", errnoErr(e))
	_, err = unix.KeyctlJoinSessionKeyring("")
	report("keyctl", err)
	_, _, e = unix.Syscall(unix.SYS_IO_URING_SETUP, 1, 0, 0)
	report("io_uring_setup", errnoErr(e))
	report("getpid", nil)
	report("exec", exec.Command("/bin/true").Run())
}

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func TestProgramJSON(t *testing.T) {
	p := defaultProfile(t)
	prog, err := p.Program()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(prog)
	if err != nil {
		t.Fatal(err)
	}
	var back Program
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(prog, back) || len(prog) < len(p.Rules) {
		t.Fatalf("program of %d instructions came back as %d", len(prog), len(back))
	}
	// Default hands out copies: changing one leaves the next alone.
	p.Rules[0].Name = "changed"
	if defaultProfile(t).Rules[0].Name == "changed" {
		t.Error("Default shares its rules between callers")
	}
	t.Logf("%d rules, %d instructions, %d bytes of JSON", len(p.Rules), len(prog), len(b))
}
