package vm

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentsandbox/agentsandbox/fsx/atomicfile"
	"github.com/agentsandbox/agentsandbox/vmrunner"
)

// DefaultProbeCache caches the KVM probe's answers for this boot. It is
// under /run (gone after a reboot) and also keyed by the boot id.
const DefaultProbeCache = "/run/agentsandbox/kvm-probe.json"

// ProbeTimeout bounds the probe guest. A working KVM runs it in a few
// milliseconds (qemu's own start-up is most of the probe's time); on a host
// where the vCPU spins, or hangs once it leaves real mode, it is cut off
// here.
const ProbeTimeout = 3 * time.Second

// KernelProbeTimeout bounds the second probe, a boot of the runner's own
// kernel. Under a working KVM it reaches its panic (no root disk) in about
// a second; on a host where the vCPU hangs once Linux leaves its real-mode
// setup, it prints "Probing EDD" and nothing more.
const KernelProbeTimeout = 15 * time.Second

// probeExitCode is qemu's exit status when the probe payload wrote 0x31 to
// the isa-debug-exit port: (0x31 << 1) | 1.
const probeExitCode = 99

// Target is what a KVM probe answers for: the CPU model and machine a
// runner passes to qemu. KVM can run a real-mode payload and still fail a
// Linux guest: nested virtualisation often refuses `-cpu host` outright
// (qemu aborts setting an MSR) and hangs other models once the guest
// leaves real mode. So a probe is only good for the CPU model it ran with.
// And a small payload can reach long mode where Linux cannot (seen on
// nested KVM with -cpu max: the payload passes, the kernel hangs after its
// real-mode setup): so where the runner names its kernel, the probe boots
// that kernel too, and only both together prove KVM.
type Target struct {
	CPU     string // -cpu value, such as "host,+x2apic,-sgx" or "max"
	Machine string // -M value without accel, such as "microvm,acpi=on"; "microvm" when empty
	Kernel  string // the runner's -kernel; "" when it names none (no kernel boot is tried)
}

// MicrovmNixTarget is what microvm.nix's qemu runner passes on x86_64-linux
// when microvm.cpu is unset (the runners nixgen generates for KVM):
// `-enable-kvm -cpu host,+x2apic,-sgx -M microvm,accel=kvm:tcg,acpi=on,…`.
var MicrovmNixTarget = Target{CPU: "host,+x2apic,-sgx", Machine: "microvm,acpi=on,mem-merge=on,pic=off,pit=off,rtc=on,usb=off"}

func (t Target) key() string {
	k := t.CPU + " | " + t.machine()
	if t.Kernel != "" {
		k += " | kernel " + t.Kernel
	}
	return k
}

func (t Target) machine() string {
	if t.Machine == "" {
		return "microvm"
	}
	return t.Machine
}

func (t Target) String() string {
	if t.CPU == "" {
		return "qemu's default CPU"
	}
	return "-cpu " + t.CPU
}

// Prober runs the KVM probe. The zero value probes with qemu-system-x86_64
// from PATH and caches in DefaultProbeCache.
type Prober struct {
	Qemu      string        // qemu-system-x86_64 from PATH when empty
	CacheFile string        // DefaultProbeCache when empty; "-" disables the cache
	Timeout   time.Duration // ProbeTimeout when zero
	// KernelTimeout bounds the boot of the runner's kernel
	// (KernelProbeTimeout when zero).
	KernelTimeout time.Duration
	KVMDevice     string // /dev/kvm when empty
}

// probeCacheVersion changes whenever the probe or its answers change
// shape, so that answers of an older probe are not reused.
const probeCacheVersion = 3

// probeCache is the cache file's content: one answer per target.
type probeCache struct {
	Version int                           `json:"version"`
	BootID  string                        `json:"bootId"`
	Answers map[string]vmrunner.KVMAnswer `json:"answers"`
}

// ProbeKVM reports whether KVM runs microvm.nix's qemu runners here (with
// MicrovmNixTarget), using the per-boot cache.
func ProbeKVM(ctx context.Context) vmrunner.KVMAnswer {
	return Prober{}.Probe(ctx, MicrovmNixTarget)
}

// ProbeTarget is ProbeKVM for another target, such as a runner's own.
func ProbeTarget(ctx context.Context, t Target) vmrunner.KVMAnswer {
	return Prober{}.Probe(ctx, t)
}

//go:embed kvmprobe/probe.bin
var probeCode []byte

// probePayload is the probe guest: 64 KiB of firmware whose reset vector
// jumps to kvmprobe/probe.S, which enters 32-bit protected mode, turns on
// paging and long mode, runs CPUID and RDTSC in a 64-bit code segment and
// then writes 0x31 to the isa-debug-exit port at 0xf4 (qemu exits with
// status 99). A vCPU that cannot get a guest that far never writes it.
func probePayload() []byte {
	b := bytes.Repeat([]byte{0xf4}, 64<<10) // hlt
	copy(b, probeCode)
	// At the reset vector (CS base 0xFFFF0000, IP 0xFFF0): ljmp 0xF000:0000,
	// the image's low alias at linear 0xF0000, where probe.S is linked.
	copy(b[0xfff0:], []byte{0xea, 0x00, 0x00, 0x00, 0xf0})
	return b
}

// targetArgs starts both probes' qemu command lines: qemu under accel
// with t's machine and, when it names one, CPU model.
func targetArgs(qemu, accel string, t Target) []string {
	argv := []string{qemu, "-M", t.machine(), "-accel", accel}
	if t.CPU != "" {
		argv = append(argv, "-cpu", t.CPU)
	}
	return argv
}

// probeArgs is the probe's qemu command line for accel and target with the
// payload in bios.
func probeArgs(qemu, accel string, t Target, bios string) []string {
	return append(targetArgs(qemu, accel, t),
		"-m", "16",
		"-nodefaults", "-no-user-config", "-display", "none",
		"-bios", bios,
		"-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
	)
}

// Probe opens the KVM device and runs the probe payload under -accel kvm
// with t's CPU model and machine, with a time limit. Answers are cached
// per boot (by /proc/sys/kernel/random/boot_id) and per target.
func (p Prober) Probe(ctx context.Context, t Target) vmrunner.KVMAnswer {
	cache := p.CacheFile
	if cache == "" {
		cache = DefaultProbeCache
	}
	bootID := readBootID()
	var c probeCache
	if cache != "-" && bootID != "" {
		if b, err := os.ReadFile(cache); err == nil {
			if json.Unmarshal(b, &c) == nil && c.BootID == bootID && c.Version == probeCacheVersion {
				if a, ok := c.Answers[t.key()]; ok {
					return a
				}
			} else {
				c = probeCache{}
			}
		}
	}
	a := p.probe(ctx, t)
	if ctx.Err() != nil {
		return vmrunner.KVMAnswer{Reason: "probe cancelled: " + ctx.Err().Error()}
	}
	if cache != "-" && bootID != "" {
		c.BootID, c.Version = bootID, probeCacheVersion
		if c.Answers == nil {
			c.Answers = map[string]vmrunner.KVMAnswer{}
		}
		c.Answers[t.key()] = a
		b, _ := json.Marshal(c)
		if err := os.MkdirAll(filepath.Dir(cache), 0o755); err == nil {
			_ = atomicfile.WriteFile(cache, append(b, '\n'), 0o644)
		}
	}
	return a
}

// ProbeAccel runs the probe payload under accel without the cache or the
// device check; tests use it with "tcg" to show the payload itself works.
func (p Prober) ProbeAccel(ctx context.Context, accel string, t Target) vmrunner.KVMAnswer {
	return p.run(ctx, accel, t)
}

func (p Prober) probe(ctx context.Context, t Target) vmrunner.KVMAnswer {
	dev := p.KVMDevice
	if dev == "" {
		dev = "/dev/kvm"
	}
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return vmrunner.KVMAnswer{Reason: fmt.Sprintf("cannot open %s: %v", dev, err)}
	}
	f.Close()
	a := p.run(ctx, "kvm", t)
	if !a.Usable || t.Kernel == "" {
		return a
	}
	return p.bootKernel(ctx, t)
}

// kernelArgs is the kernel probe's qemu command line: the runner's kernel
// with its CPU model and machine, a serial console on stdout, no disk, no
// network, and no reboot, so that the kernel's panic at mounting its root
// ends qemu.
func kernelArgs(qemu string, t Target) []string {
	return append(targetArgs(qemu, "kvm", t),
		"-m", "256", "-smp", "1",
		"-nodefaults", "-no-user-config", "-display", "none",
		"-serial", "stdio", "-no-reboot",
		"-kernel", t.Kernel,
		"-append", "console=ttyS0 panic=-1 loglevel=4",
	)
}

// bootKernel boots t.Kernel under KVM with t's CPU model and machine and
// answers usable when Linux itself ran ("Linux version" on its console)
// and qemu ended on its own before KernelProbeTimeout.
func (p Prober) bootKernel(ctx context.Context, t Target) vmrunner.KVMAnswer {
	qemu, err := p.qemu()
	if err != nil {
		return vmrunner.KVMAnswer{Reason: err.Error()}
	}
	timeout := p.KernelTimeout
	if timeout == 0 {
		timeout = KernelProbeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	argv := kernelArgs(qemu, t)
	out := &boundedBuffer{max: 64 << 10}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	return kernelVerdict(t, timeout, ctx.Err() == context.DeadlineExceeded, err, out.String())
}

// kernelVerdict turns how the kernel probe's qemu ended into the answer.
func kernelVerdict(t Target, timeout time.Duration, timedOut bool, err error, output string) vmrunner.KVMAnswer {
	output = strings.TrimSpace(output)
	booted := strings.Contains(output, "Linux version")
	a := vmrunner.KVMAnswer{Detail: lastLines(output, 3)}
	switch {
	case timedOut && !booted:
		a.Reason = fmt.Sprintf("a probe guest under -accel kvm with %s reached long mode, but the runner's kernel did not start within %v (the vCPU hangs once Linux leaves its real-mode setup)", t, timeout)
	case timedOut:
		a.Reason = fmt.Sprintf("a probe guest under -accel kvm with %s reached long mode, but the runner's kernel did not finish booting within %v", t, timeout)
	case !booted && err != nil:
		a.Reason = fmt.Sprintf("a probe guest under -accel kvm with %s reached long mode, but qemu failed booting the runner's kernel (%v): %s", t, err, firstError(output))
	case !booted:
		a.Reason = fmt.Sprintf("a probe guest under -accel kvm with %s reached long mode, but the runner's kernel printed nothing before qemu ended", t)
	default:
		a.Usable, a.Detail = true, ""
		a.Reason = fmt.Sprintf("a probe guest under -accel kvm with %s reached long mode and the runner's kernel booted", t)
	}
	return a
}

// boundedBuffer keeps the first max bytes written to it and drops the rest.
type boundedBuffer struct {
	buf bytes.Buffer
	max int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); room > 0 {
		if len(p) < room {
			room = len(p)
		}
		b.buf.Write(p[:room])
	}
	return len(p), nil
}

func (b *boundedBuffer) String() string { return b.buf.String() }

// qemu is the qemu both probes run: Prober.Qemu, else qemu-system-x86_64
// from PATH.
func (p Prober) qemu() (string, error) {
	if p.Qemu != "" {
		return p.Qemu, nil
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return "", errors.New("qemu-system-x86_64 not found (apt-get install qemu-system-x86)")
	}
	return qemu, nil
}

func (p Prober) run(ctx context.Context, accel string, t Target) vmrunner.KVMAnswer {
	qemu, err := p.qemu()
	if err != nil {
		return vmrunner.KVMAnswer{Reason: err.Error()}
	}
	timeout := p.Timeout
	if timeout == 0 {
		timeout = ProbeTimeout
	}
	dir, err := os.MkdirTemp("", "asb-kvm-probe-")
	if err != nil {
		return vmrunner.KVMAnswer{Reason: "probe: " + err.Error()}
	}
	defer os.RemoveAll(dir)
	bios := filepath.Join(dir, "probe.bin")
	if err := os.WriteFile(bios, probePayload(), 0o644); err != nil {
		return vmrunner.KVMAnswer{Reason: "probe: " + err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	argv := probeArgs(qemu, accel, t, bios)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return probeVerdict(accel, t, timeout, ctx.Err() == context.DeadlineExceeded, exitCode(err), err, out.String())
}

// probeVerdict turns how the probe's qemu ended into the answer: usable
// only when the payload reached its exit port from long mode. The reason
// is one line (with qemu's first error, when it printed one); the detail
// keeps qemu's last lines, assertion text and all.
func probeVerdict(accel string, t Target, timeout time.Duration, timedOut bool, code int, err error, output string) vmrunner.KVMAnswer {
	output = strings.TrimSpace(output)
	a := vmrunner.KVMAnswer{Detail: lastLines(output, 3)}
	switch {
	case timedOut:
		a.Reason = fmt.Sprintf("a probe guest under -accel %s with %s did not reach long mode within %v (the vCPU hangs)", accel, t, timeout)
	case code == probeExitCode:
		a.Usable, a.Detail = true, ""
		a.Reason = fmt.Sprintf("a probe guest under -accel %s with %s reached long mode", accel, t)
	case err == nil:
		a.Reason = fmt.Sprintf("the probe guest under -accel %s with %s exited without running its payload", accel, t)
	case output != "":
		a.Reason = fmt.Sprintf("qemu -accel %s with %s failed (%v): %s", accel, t, err, firstError(output))
	default:
		a.Reason = fmt.Sprintf("qemu -accel %s with %s failed: %v", accel, t, err)
	}
	return a
}

// firstError is the first line of qemu's output without qemu's own
// prefixes, bounded: "failed to set MSR 0x10a to 0x69".
func firstError(output string) string {
	line, _, _ := strings.Cut(output, "\n")
	line = strings.TrimSpace(line)
	if i := strings.Index(line, ": "); i > 0 && strings.HasPrefix(line, "qemu") {
		line = line[i+2:]
	}
	line = strings.TrimPrefix(line, "error: ")
	if len(line) > 120 {
		line = line[:120] + "…"
	}
	return line
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}

// RunnerTarget is the probe target a qemu runner's microvm-run really
// uses: the -cpu and -M options (accel removed) and the -kernel of the
// command in it that runs qemu. A runner that sets no -cpu gets qemu's default model, which
// is what the probe then tries. It fails when it cannot read them: no
// command runs qemu, or the options come from a variable. Such a runner's
// target is unknown, and KVM is not proven for it by any probe.
func RunnerTarget(script string) (Target, error) {
	for _, cmd := range shellCommands(script) {
		for i, w := range cmd {
			if !isQemu(w) {
				continue
			}
			var t Target
			args := cmd[i+1:]
			for j := 0; j+1 < len(args); j++ {
				switch args[j] {
				case "-cpu":
					t.CPU = args[j+1]
				case "-M", "-machine":
					t.Machine = withoutAccel(args[j+1])
				case "-kernel":
					t.Kernel = args[j+1]
				}
			}
			if strings.Contains(t.CPU+t.Machine+t.Kernel, "$") {
				return Target{}, fmt.Errorf("its qemu command takes -cpu, -M or -kernel from a shell variable (%s)", t)
			}
			return t, nil
		}
	}
	return Target{}, errors.New("no command in it runs qemu-system-*")
}

// isQemu says whether a command word names qemu's system emulator.
func isQemu(word string) bool {
	base := filepath.Base(word)
	return base == "qemu" || base == "qemu-kvm" || strings.HasPrefix(base, "qemu-system-")
}

// withoutAccel drops accel=… (and a type= prefix) from a -M value: the
// probe picks the accel.
func withoutAccel(m string) string {
	var keep []string
	for _, part := range strings.Split(m, ",") {
		part = strings.TrimPrefix(part, "type=")
		if !strings.HasPrefix(part, "accel=") {
			keep = append(keep, part)
		}
	}
	return strings.Join(keep, ",")
}

// shellCommands splits a shell script into simple commands, each a list of
// words, the way sh would for the plain quoting microvm.nix's
// escapeShellArgs and the fixture's runners write: # comments, single
// quotes, double quotes, backslash escapes and line continuations; commands
// end at an unquoted newline, ;, & or |. Nothing is expanded: a word keeps
// its $ references as written.
func shellCommands(s string) [][]string {
	var cmds [][]string
	var words []string
	var cur strings.Builder
	in := false // a word is open
	endWord := func() {
		if in {
			words = append(words, cur.String())
			cur.Reset()
			in = false
		}
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
			words = nil
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '#' && !in:
			for i < len(s) && s[i] != '\n' {
				i++
			}
			endCmd()
		case c == '\'':
			in = true
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				cur.WriteString(s[i+1:])
				i = len(s)
				break
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case c == '"':
			in = true
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0 {
					i++
					if s[i] == '\n' {
						continue
					}
				}
				cur.WriteByte(s[i])
			}
		case c == '\\' && i+1 < len(s):
			i++
			if s[i] != '\n' {
				in = true
				cur.WriteByte(s[i])
			}
		case c == ' ' || c == '\t':
			endWord()
		case c == '\n' || c == ';' || c == '&' || c == '|':
			endCmd()
		default:
			in = true
			cur.WriteByte(c)
		}
	}
	endCmd()
	return cmds
}

func readBootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
