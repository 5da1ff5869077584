package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/internal/vmfixture"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/workflow"
)

func TestCRLFWriter(t *testing.T) {
	for _, tc := range []struct {
		chunks []string
		want   string
	}{
		{[]string{"a\r\nb\r\n"}, "a\nb\n"},
		{[]string{"a\r", "\nb"}, "a\nb"},
		{[]string{"a\r", "b"}, "a\rb"},
		{[]string{"\r\r\n"}, "\r\n"},
		{[]string{"plain\n"}, "plain\n"},
	} {
		var out bytes.Buffer
		w := &crlfWriter{w: &out}
		for _, c := range tc.chunks {
			if n, err := w.Write([]byte(c)); err != nil || n != len(c) {
				t.Fatalf("Write(%q) = %d, %v", c, n, err)
			}
		}
		if out.String() != tc.want {
			t.Errorf("%q → %q, want %q", tc.chunks, out.String(), tc.want)
		}
	}
}

func TestScriptAccel(t *testing.T) {
	for _, tc := range []struct {
		script  string
		fromEnv bool
		baked   string
	}{
		{`exec qemu -accel "${ACCEL:-tcg}" -m 256M`, true, ""},
		{`exec '/nix/store/x-qemu/bin/qemu-system-x86_64' '-M' 'microvm,accel=kvm:tcg,acpi=on' '-enable-kvm'`, false, "kvm"},
		{`exec qemu -M 'microvm,accel=tcg,acpi=on'`, false, "tcg"},
		{`exec qemu -accel tcg`, false, "tcg"},
		{`exec qemu -M microvm`, false, "tcg"},
	} {
		fromEnv, baked := scriptAccel(tc.script)
		if fromEnv != tc.fromEnv || baked != tc.baked {
			t.Errorf("scriptAccel(%q) = %v, %q; want %v, %q", tc.script, fromEnv, baked, tc.fromEnv, tc.baked)
		}
	}
}

func TestReadRunner(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"bin/microvm-run":              "#!/bin/sh\nexec qemu -M 'microvm,accel=kvm:tcg'\n",
		"bin/microvm-shutdown":         "#!/bin/sh\n",
		"share/microvm/hypervisor":     "qemu\n",
		"share/microvm/tap-interfaces": "vm-a\nvm-b\n",
		"share/microvm/tap-flags":      "vnet_hdr\nmulti_queue\n",
	}
	for n, c := range files {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadRunner(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := RunnerInfo{Dir: dir, Hypervisor: "qemu", Taps: []string{"vm-a", "vm-b"}, TapVnetHdr: true,
		TapMultiQueue: true, HasShutdown: true, BakedAccel: "kvm", Target: Target{Machine: "microvm"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadRunner = %+v\nwant         %+v", got, want)
	}
	if _, err := ReadRunner(t.TempDir()); err == nil {
		t.Error("ReadRunner of an empty directory: no error")
	}

	// A cloud-hypervisor runner needs KVM whatever its script says.
	os.WriteFile(filepath.Join(dir, "share/microvm/hypervisor"), []byte("cloud-hypervisor\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "bin/microvm-run"), []byte("#!/bin/sh\nexec cloud-hypervisor --kernel k\n"), 0o755)
	got, err = ReadRunner(dir)
	if err != nil || got.BakedAccel != "kvm" || got.AccelFromEnv {
		t.Errorf("cloud-hypervisor runner: %+v %v, want BakedAccel kvm", got, err)
	}
}

func TestLimits(t *testing.T) {
	noDevice := func(p string) (cgroup.Device, error) {
		t.Errorf("deviceOf(%q) called for a step without IO rates", p)
		return cgroup.Device{}, errors.New("unexpected")
	}
	got, err := Limits(workflow.Resources{VCPU: 2, Memory: 1000 << 20}, "/ws", noDevice)
	if err != nil || got.MemoryBytes != 1000<<20+256<<20+100<<20 || got.VCPU != 3 || got.PIDs != HypervisorPIDs || got.IODevices != nil {
		t.Errorf("Limits = %+v, %v", got, err)
	}
	if d, err := Limits(workflow.Resources{}, "/ws", noDevice); err != nil || d.MemoryBytes != DefaultGuestMemory+256<<20+DefaultGuestMemory/10 || d.VCPU != 2 {
		t.Errorf("default Limits = %+v, %v", d, err)
	}

	vda := func(p string) (cgroup.Device, error) {
		if p != "/ws" {
			t.Errorf("deviceOf(%q), want the workspace /ws", p)
		}
		return cgroup.Device{Major: 253, Minor: 0}, nil
	}
	got, err = Limits(workflow.Resources{VCPU: 1, Memory: 1000 << 20, IOReadBps: 5e6, IOWriteBps: 1 << 20}, "/ws", vda)
	want := cgroup.Limits{MemoryBytes: 1000<<20 + 256<<20 + 100<<20, VCPU: 2, PIDs: HypervisorPIDs,
		IOReadBps: 5e6, IOWriteBps: 1 << 20, IODevices: []cgroup.Device{{Major: 253, Minor: 0}}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("throttled Limits = %+v, %v; want %+v", got, err, want)
	}

	tmpfs := errors.New("block device of /ws: 0:45 is not a block device")
	_, err = Limits(workflow.Resources{IOReadBps: 1 << 20}, "/ws", func(string) (cgroup.Device, error) { return cgroup.Device{}, tmpfs })
	if !errors.Is(err, tmpfs) || !strings.Contains(err.Error(), "throttle disk IO of the workspace /ws (ioRead 1MiB/s, ioWrite unlimited)") {
		t.Errorf("Limits on a workspace without a disk: %v, want a throttle error naming the workspace, wrapping the device error", err)
	}
}

func TestCommandsAreData(t *testing.T) {
	if got, want := runnerCommand("/nix/store/r"), []string{"/nix/store/r/bin/microvm-run"}; !reflect.DeepEqual(got, want) {
		t.Errorf("RunnerCommand = %q", got)
	}
	if got, want := probeArgs("qemu", "kvm", MicrovmNixTarget, "/p.bin"), []string{"qemu",
		"-M", "microvm,acpi=on,mem-merge=on,pic=off,pit=off,rtc=on,usb=off", "-accel", "kvm", "-cpu", "host,+x2apic,-sgx",
		"-m", "16", "-nodefaults", "-no-user-config", "-display", "none", "-bios", "/p.bin",
		"-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ProbeArgs = %q", got)
	}
	if got := probeArgs("qemu", "tcg", Target{}, "/p.bin"); !reflect.DeepEqual(got[:5], []string{"qemu", "-M", "microvm", "-accel", "tcg"}) || got[5] == "-cpu" {
		t.Errorf("ProbeArgs without a CPU model = %q, want machine microvm and qemu's default CPU", got)
	}
}

// TestRunnerTarget: the probe runs with what microvm-run really passes,
// read from the command that runs qemu; comments and other commands do not
// confuse it, and a target it cannot read is an error, never a guess.
func TestRunnerTarget(t *testing.T) {
	fixture := vmfixture.Runner{Name: "f", Qemu: "/usr/bin/qemu-system-x86_64", Kernel: "/k", Initrd: "/i",
		KernelParams: []string{"it's=quoted"}}
	for _, tc := range []struct {
		name, script string
		want         Target
	}{
		{"microvm.nix default (escapeShellArgs)",
			"#! /nix/store/x-bash/bin/bash -e\nset -eou pipefail\nexec -a \"microvm@hello\" '/nix/store/q-qemu/bin/qemu-system-x86_64' '-name' 'hello' '-M' 'microvm,accel=kvm:tcg,acpi=on,mem-merge=on,pcie=off,pic=off,pit=off,rtc=on,usb=off' '-m' '512M' '-smp' '1' '-serial' 'chardev:stdio' '-enable-kvm' '-cpu' 'host,+x2apic,-sgx' '-device' 'i8042'\n",
			Target{CPU: "host,+x2apic,-sgx", Machine: "microvm,acpi=on,mem-merge=on,pcie=off,pic=off,pit=off,rtc=on,usb=off"}},
		{"nixgen's software-emulation runner",
			"exec '/nix/store/q/bin/qemu-system-x86_64' '-M' 'microvm,accel=tcg,acpi=on' '-cpu' 'max'\n",
			Target{CPU: "max", Machine: "microvm,acpi=on"}},
		{"the test fixture", "#!/bin/busybox sh\nset -eu\nexec /q/qemu -name f -M microvm,acpi=on,rtc=on -accel \"${ACCEL:-tcg}\" -cpu max -m 256M\n",
			Target{CPU: "max", Machine: "microvm,acpi=on,rtc=on"}},
		// The fixture's own script: its comments say "the VM's own working
		// directory", an apostrophe a quote-only reader takes for a quote.
		{"the fixture's RunScript, comments and all", fixture.RunScript("/bb/busybox"),
			Target{CPU: "max", Machine: "microvm,acpi=on,mem-merge=on,pcie=off,pic=off,pit=off,rtc=on,usb=off", Kernel: "/k"}},
		{"microvm.nix's kernel", "exec '/q/qemu-system-x86_64' '-M' 'microvm' '-cpu' 'max' '-kernel' '/nix/store/k-linux/bzImage' '-initrd' '/nix/store/i/initrd'\n",
			Target{CPU: "max", Machine: "microvm", Kernel: "/nix/store/k-linux/bzImage"}},
		{"comment with quotes before, other commands around",
			"#!/bin/sh\n# don't -cpu host here\necho '-cpu pentium' ; test -e /dev/kvm && \\\n  exec qemu-system-x86_64 -machine type=q35,accel=kvm -cpu Skylake-Client # not -cpu max\n",
			Target{CPU: "Skylake-Client", Machine: "q35"}},
		{"no -cpu: qemu's default model", "exec qemu -M q35 -m 1G\n", Target{Machine: "q35"}},
	} {
		got, err := RunnerTarget(tc.script)
		if err != nil || got != tc.want {
			t.Errorf("%s: RunnerTarget = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ name, script, errWant string }{
		{"no qemu at all", "#!/bin/sh\nexec cloud-hypervisor --cpus boot=1\n", "no command in it runs qemu"},
		{"qemu only in a comment", "#!/bin/sh\n# exec qemu-system-x86_64 -cpu max\nexec \"$HV\" \"$@\"\n", "no command in it runs qemu"},
		{"-cpu from a variable", "exec qemu-system-x86_64 -M microvm -cpu \"$CPU\"\n", "shell variable"},
		{"-kernel from a variable", "exec qemu-system-x86_64 -M microvm -cpu max -kernel \"$K\"\n", "shell variable"},
	} {
		if got, err := RunnerTarget(tc.script); err == nil || !strings.Contains(err.Error(), tc.errWant) {
			t.Errorf("%s: RunnerTarget = %+v, %v; want an error with %q", tc.name, got, err, tc.errWant)
		}
	}
}

// TestProbeVerdict: only a payload that reached its exit port from long
// mode makes KVM usable; qemu's abort on a nested host and a hung vCPU do not.
func TestProbeVerdict(t *testing.T) {
	abort := errors.New("exit status 134")
	for _, tc := range []struct {
		name     string
		timedOut bool
		code     int
		err      error
		out      string
		usable   bool
		reason   string
	}{
		{"reached long mode", false, probeExitCode, errors.New("exit status 99"), "", true, "reached long mode"},
		{"qemu aborts on -cpu host (nested KVM)", false, 134, abort,
			"qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69\nqemu-system-x86_64: ../target/i386/kvm/kvm.c:3012: kvm_buf_set_msrs: Assertion `ret == cpu->kvm_msr_buf->nmsrs' failed.",
			false, "failed to set MSR 0x10a"},
		{"vCPU hangs after real mode", true, -1, errors.New("signal: killed"), "", false, "did not reach long mode within 3s (the vCPU hangs)"},
		{"exits without the payload", false, 0, nil, "", false, "exited without running its payload"},
	} {
		a := probeVerdict("kvm", MicrovmNixTarget, ProbeTimeout, tc.timedOut, tc.code, tc.err, tc.out)
		if a.Usable != tc.usable || !strings.Contains(a.Reason, tc.reason) || !strings.Contains(a.Reason, "-cpu host,+x2apic,-sgx") {
			t.Errorf("%s: verdict %+v; want %v and a reason naming the CPU model and %q", tc.name, a, tc.usable, tc.reason)
		}
		if strings.Contains(a.Reason, "\n") || strings.Contains(a.Reason, "Assertion") {
			t.Errorf("%s: reason %q is not one short line: qemu's assertion text belongs in the detail", tc.name, a.Reason)
		}
		if tc.out != "" && !strings.Contains(a.Detail, "Assertion") {
			t.Errorf("%s: detail %q lacks qemu's last lines", tc.name, a.Detail)
		}
	}
}

// TestProbePayload: the firmware jumps from the reset vector to the code
// assembled from kvmprobe/probe.S.
func TestProbePayload(t *testing.T) {
	p := probePayload()
	if len(p) != 64<<10 {
		t.Fatalf("payload is %d bytes, want 64 KiB", len(p))
	}
	if !bytes.Equal(p[0xfff0:0xfff5], []byte{0xea, 0x00, 0x00, 0x00, 0xf0}) {
		t.Errorf("reset vector = % x, want ljmp 0xf000:0000", p[0xfff0:0xfff5])
	}
	if !bytes.Equal(p[:len(probeCode)], probeCode) || len(probeCode) < 64 {
		t.Errorf("payload does not start with the %d-byte probe code", len(probeCode))
	}
}

// TestProbePayloadMatchesSource reassembles kvmprobe/probe.S with the GNU
// assembler (binutils comes with gcc) and compares it with the embedded
// probe.bin, so the binary is always what the commented source says.
func TestProbePayloadMatchesSource(t *testing.T) {
	for _, tool := range []string{"as", "ld"} {
		if _, err := exec.LookPath(tool); err != nil {
			testtier.Skip(t, "unit", tool+" not found (apt-get install binutils)")
		}
	}
	dir := t.TempDir()
	obj, bin := filepath.Join(dir, "probe.o"), filepath.Join(dir, "probe.bin")
	for _, argv := range [][]string{
		{"as", "--32", "-o", obj, "kvmprobe/probe.S"},
		{"ld", "-m", "elf_i386", "-Ttext=0", "--oformat", "binary", "-o", bin, obj},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%q: %v\n%s", argv, err, out)
		}
	}
	got, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, probeCode) {
		t.Errorf("kvmprobe/probe.bin differs from kvmprobe/probe.S assembled (%d vs %d bytes): rebuild it with the commands in probe.S", len(probeCode), len(got))
	}
}

// TestAccelDecision: which accelerator a runner gets from the probe and
// the override, the reason every message states, and the errors when a
// KVM-only runner cannot run.
func TestAccelDecision(t *testing.T) {
	fromEnv := RunnerInfo{Dir: "/r/fixture", AccelFromEnv: true, Target: Target{CPU: "max", Machine: "microvm"}}
	unreadable := RunnerInfo{Dir: "/r/odd", AccelFromEnv: true, TargetUnknown: "cannot read the CPU model"}
	bakedKVM := RunnerInfo{Dir: "/r/kvm", BakedAccel: "kvm", Target: MicrovmNixTarget}
	bakedTCG := RunnerInfo{Dir: "/r/tcg", BakedAccel: "tcg", Target: Target{CPU: "max", Machine: "microvm,acpi=on"}}
	const note = "KVM cannot run microvm.nix's guests here (probe said no)"
	for _, tc := range []struct {
		name    string
		force   string
		kvm     bool
		ri      RunnerInfo
		note    string
		want    string
		reason  string // in the decision's reason
		errWant string
		probes  bool // the runner's own target is probed
		warn    bool
	}{
		{"env runner, KVM runs its model", "", true, fromEnv, "", "kvm", "probe says yes", "", true, false},
		{"env runner, KVM cannot", "", false, fromEnv, "", "tcg", "KVM cannot run this guest here: probe says no", "", true, true},
		{"env runner whose target cannot be read", "", true, unreadable, "", "tcg", "cannot read the CPU model, so KVM is not proven", "", false, true},
		{"microvm.nix runner, KVM runs -cpu host", "", true, bakedKVM, "", "kvm", "probe says yes", "", true, false},
		{"microvm.nix runner, nested KVM aborts", "", false, bakedKVM, "", "", "", "--accel tcg", true, false},
		{"software-emulation runner the realiser chose", "", false, bakedTCG, note, "tcg", note, "", false, true},
		{"software-emulation runner of a user's flake", "", true, bakedTCG, "", "tcg", "built for software emulation", "", false, true},
		{"forced tcg, env runner", "tcg", true, fromEnv, "", "tcg", "forced", "", false, false},
		{"forced tcg, KVM-only runner", "tcg", true, bakedKVM, "", "", "", "software emulation was forced", false, false},
		{"forced kvm, env runner", "kvm", false, fromEnv, "", "kvm", "forced", "", false, false},
	} {
		var asked []Target
		var warn bytes.Buffer
		b := New(Options{Accel: tc.force, Warn: func(l string) { fmt.Fprintln(&warn, l) }, Probe: func(_ context.Context, tg Target) vmrunner.KVMAnswer {
			asked = append(asked, tg)
			if tc.kvm {
				return vmrunner.KVMAnswer{Usable: true, Reason: "probe says yes"}
			}
			return vmrunner.KVMAnswer{Reason: "probe says no", Detail: "qemu's assertion"}
		}})
		got, err := b.accel(context.Background(), tc.ri, tc.note)
		if tc.errWant != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errWant) {
				t.Errorf("%s: accel = %+v, %v; want an error with %q", tc.name, got, err, tc.errWant)
			}
		} else if err != nil || got.Accel != tc.want || !strings.Contains(got.Reason, tc.reason) {
			t.Errorf("%s: accel = %+v, %v; want %q because %q", tc.name, got, err, tc.want, tc.reason)
		}
		if tc.probes && (len(asked) != 1 || asked[0] != tc.ri.Target) {
			t.Errorf("%s: probed %+v, want the runner's own target %+v once", tc.name, asked, tc.ri.Target)
		}
		if !tc.probes && len(asked) != 0 {
			t.Errorf("%s: probed %+v, want no probe", tc.name, asked)
		}
		if w := warn.String(); (w != "") != tc.warn || strings.Count(w, "\n") > 1 || (tc.warn && !strings.Contains(w, got.Reason)) {
			t.Errorf("%s: warning %q; want one line stating the decision's reason: %v", tc.name, w, tc.warn)
		}
		// A second step of the same runner asks nobody and warns no more.
		warn.Reset()
		n := len(asked)
		if again, _ := b.accel(context.Background(), tc.ri, tc.note); again != got || len(asked) != n || warn.Len() != 0 {
			t.Errorf("%s: second step decided %+v, probed %d more times, warned %q", tc.name, again, len(asked)-n, warn.String())
		}
	}
}

// TestStartError: a guest that never started names KVM and the way out
// only under KVM, and shows the console's last lines.
func TestStartError(t *testing.T) {
	e := &StartError{Accel: AccelDecision{"kvm", "a probe guest under -accel kvm with -cpu max reached long mode"},
		What:        "the hypervisor ended (exit status 134) before the guest started it",
		ConsoleTail: "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69\n"}
	msg := e.Error()
	for _, want := range []string{"never started", "exit status 134", "(accel kvm: a probe guest under -accel kvm with -cpu max reached long mode)",
		"--accel tcg", "AGENTSANDBOX_ACCEL=tcg", "\n    qemu-system-x86_64: error: failed to set MSR 0x10a"} {
		if !strings.Contains(msg, want) {
			t.Errorf("StartError = %q, lacks %q", msg, want)
		}
	}
	msg = (&StartError{Accel: AccelDecision{Accel: "tcg"}, What: "x"}).Error()
	if strings.Contains(msg, "KVM") || !strings.Contains(msg, "the console was empty") {
		t.Errorf("StartError under tcg = %q: no KVM advice, and say the console was empty", msg)
	}
	var long strings.Builder
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&long, "line %d\n", i)
	}
	msg = (&StartError{Accel: AccelDecision{Accel: "tcg"}, What: "x", ConsoleTail: long.String()}).Error()
	if strings.Contains(msg, "line 24\n") || !strings.Contains(msg, "line 39") {
		t.Errorf("StartError shows too much or too little of the console:\n%s", msg)
	}
}

// TestConsoleWatch: the start line and a panic are seen across writes, and
// the tail is bounded.
func TestConsoleWatch(t *testing.T) {
	c := newConsoleWatch()
	line := guest.ConsoleStartLine
	c.Write([]byte(strings.Repeat("x", 5000) + line[:7]))
	if _, started := c.state(); started {
		t.Fatal("started before the whole line")
	}
	c.Write([]byte(line[7:] + "\n"))
	select {
	case <-c.started:
	default:
		t.Fatal("start line split across writes not seen")
	}
	c.Write([]byte("Kernel pa"))
	c.Write([]byte("nic - not syncing\n"))
	if p, _ := c.state(); !p {
		t.Error("panic split across writes not seen")
	}
	if n := len(c.tail()); n != ConsoleTailBytes {
		t.Errorf("tail is %d bytes, want %d", n, ConsoleTailBytes)
	}
}

type closeBuffer struct {
	bytes.Buffer
	closed bool
}

func (c *closeBuffer) Close() error { c.closed = true; return nil }

// TestHeadTail: the console log keeps the first and the last bytes of a
// flood, says how much it cut, and keeps everything when there is room.
func TestHeadTail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
		want   string
	}{
		{"fits", []string{"abc", "de"}, "abcde"},
		{"head and a short tail", []string{"abcd", "ef"}, "abcdef"},
		{"cut", []string{"ab", "cdefgh", "ij", "klm"}, "abcd\n[agentsandbox: 5 bytes of console output cut here]\njklm"},
		{"one huge write", []string{"abcdefghijklmnopqrstuvwxyz"}, "abcd\n[agentsandbox: 18 bytes of console output cut here]\nwxyz"},
		{"ring wraps exactly", []string{"abcd", "efgh", "ijkl"}, "abcd\n[agentsandbox: 4 bytes of console output cut here]\nijkl"},
	} {
		var out closeBuffer
		h := newHeadTail(&out, 4, 4)
		for _, c := range tc.chunks {
			if n, err := h.Write([]byte(c)); n != len(c) || err != nil {
				t.Fatalf("%s: Write = %d, %v", tc.name, n, err)
			}
		}
		if err := h.Close(); err != nil || !out.closed {
			t.Fatalf("%s: Close = %v, closed %v", tc.name, err, out.closed)
		}
		if out.String() != tc.want {
			t.Errorf("%s: log %q, want %q", tc.name, out.String(), tc.want)
		}
	}
	if got := HypervisorRlimits(workflow.Resources{Disk: 1 << 30, Memory: 512 << 20}).FSize; got != 1<<30+uint64(hypervisorMemory(workflow.Resources{Memory: 512 << 20})) {
		t.Errorf("hypervisor fsize = %d", got)
	}
}

// fakeQemu writes a qemu-system-x86_64 stand-in for the probe: under
// -accel kvm with any -cpu it behaves like qemu on a host with nested KVM
// (shape "abort": it prints qemu's MSR error and aborts at once; shape
// "hang": its vCPU never gets anywhere); with qemu's default CPU model, or
// under tcg, the payload reaches its exit port (status 99). It returns the
// fake and a stand-in KVM device that opens.
func fakeQemu(t *testing.T, shape string) (qemu, device string) {
	t.Helper()
	dir := t.TempDir()
	var kvmWithCPU string
	switch shape {
	case "abort":
		kvmWithCPU = `echo 'qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69' >&2
    echo "qemu-system-x86_64: ../../target/i386/kvm/kvm.c:3183: kvm_buf_set_msrs: Assertion 'ret == cpu->kvm_msr_buf->nmsrs' failed." >&2
    kill -ABRT $$`
	case "hang":
		kvmWithCPU = "exec sleep 30"
	case "kernel-hang": // the payload reaches long mode; Linux stops after its real-mode setup
		kvmWithCPU = "case \"$*\" in *-kernel*) echo 'Probing EDD (edd=off to disable)... ok'; exec sleep 30;; esac"
	case "boots":
		kvmWithCPU = "case \"$*\" in *-kernel*) echo 'Linux version 6.1.0-57-amd64'; echo 'Kernel panic - not syncing: VFS: Unable to mount root fs'; exit 0;; esac"
	}
	script := "#!/bin/sh\ncase \"$*\" in\n  *'-accel kvm -cpu '*)\n    " + kvmWithCPU + "\n    ;;\nesac\nexit 99\n"
	qemu = filepath.Join(dir, "qemu-system-x86_64")
	device = filepath.Join(dir, "kvm")
	if err := os.WriteFile(qemu, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(device, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return qemu, device
}

// TestProbeShapes: the two ways nested KVM fails a guest, each seen by
// the probe of the CPU model the runner uses, while qemu's default model
// passes, as on such a host. It needs no /dev/kvm.
func TestProbeShapes(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ shape, reason, detail string }{
		{"abort", "failed (signal: aborted): failed to set MSR 0x10a to 0x69", "Assertion"},
		{"hang", "did not reach long mode within 500ms (the vCPU hangs)", ""},
	} {
		qemu, dev := fakeQemu(t, tc.shape)
		p := Prober{Qemu: qemu, CacheFile: "-", KVMDevice: dev, Timeout: 500 * time.Millisecond}
		if a := p.Probe(ctx, Target{}); !a.Usable {
			t.Errorf("%s: qemu's default CPU = %+v, want usable", tc.shape, a)
		}
		a := p.Probe(ctx, Target{CPU: "max", Machine: "microvm,acpi=on"})
		if a.Usable || !strings.Contains(a.Reason, "-cpu max") || !strings.Contains(a.Reason, tc.reason) || !strings.Contains(a.Detail, tc.detail) {
			t.Errorf("%s: -cpu max = %+v; want unusable, naming -cpu max and %q", tc.shape, a, tc.reason)
		}
	}
}

// TestKernelProbe: where the target names the runner's kernel, KVM is
// usable only when that kernel boots under it too: a payload that reaches
// long mode is not enough (nested KVM with -cpu max hangs Linux after
// "Probing EDD"). A target without a kernel is judged by the payload.
func TestKernelProbe(t *testing.T) {
	ctx := context.Background()
	max := Target{CPU: "max", Machine: "microvm,acpi=on"}
	withKernel := max
	withKernel.Kernel = "/k"
	qemu, dev := fakeQemu(t, "kernel-hang")
	p := Prober{Qemu: qemu, CacheFile: "-", KVMDevice: dev, Timeout: 500 * time.Millisecond, KernelTimeout: 500 * time.Millisecond}
	if a := p.Probe(ctx, max); !a.Usable {
		t.Errorf("no kernel named: %+v, want usable on the payload's answer", a)
	}
	a := p.Probe(ctx, withKernel)
	if a.Usable || !strings.Contains(a.Reason, "-cpu max") || !strings.Contains(a.Reason, "the runner's kernel did not start within 500ms") || !strings.Contains(a.Detail, "Probing EDD") {
		t.Errorf("kernel hangs: %+v; want unusable, naming -cpu max, the kernel and its console", a)
	}
	qemu, dev = fakeQemu(t, "boots")
	p = Prober{Qemu: qemu, CacheFile: "-", KVMDevice: dev, Timeout: 500 * time.Millisecond, KernelTimeout: 5 * time.Second}
	if a := p.Probe(ctx, withKernel); !a.Usable || !strings.Contains(a.Reason, "kernel booted") {
		t.Errorf("kernel boots: %+v; want usable", a)
	}
	if got := kernelArgs("qemu", withKernel); !slices.Contains(got, "-no-reboot") || !slices.Contains(got, "/k") || slices.Contains(got, "-initrd") {
		t.Errorf("kernelArgs = %q; want the kernel alone, no reboot", got)
	}
}

// TestAccelDecisionOfFixtureRunner is the decision on a host whose KVM
// runs qemu's default CPU but aborts or hangs with -cpu max (or runs the
// probe payload with it and hangs Linux), for the VM
// test fixture's own runner (which passes -cpu max and whose comments hold
// an apostrophe): software emulation, the reason naming -cpu max, one
// warning saying so; never KVM on another target's answer.
func TestAccelDecisionOfFixtureRunner(t *testing.T) {
	dir := t.TempDir()
	r := vmfixture.Runner{Name: "f", Qemu: "/usr/bin/qemu-system-x86_64", Kernel: "/k", Initrd: "/i"}
	files := r.ShareFiles()
	files["bin/microvm-run"] = r.RunScript("/bin/busybox")
	for n, c := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, n)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ri, err := ReadRunner(dir)
	if err != nil || !ri.AccelFromEnv || ri.Target.CPU != "max" || ri.TargetUnknown != "" {
		t.Fatalf("ReadRunner of the fixture = %+v, %v; want $ACCEL and -cpu max", ri, err)
	}
	for _, shape := range []string{"abort", "hang", "kernel-hang"} {
		qemu, dev := fakeQemu(t, shape)
		var warn bytes.Buffer
		b := New(Options{Warn: func(l string) { fmt.Fprintln(&warn, l) }, Probe: func(ctx context.Context, tg Target) vmrunner.KVMAnswer {
			return Prober{Qemu: qemu, CacheFile: "-", KVMDevice: dev, Timeout: 500 * time.Millisecond, KernelTimeout: 500 * time.Millisecond}.Probe(ctx, tg)
		}})
		d, err := b.accel(context.Background(), ri, "")
		if err != nil || d.Accel != "tcg" || !strings.Contains(d.Reason, "-cpu max") {
			t.Errorf("%s: decision %+v, %v; want tcg because KVM cannot run -cpu max", shape, d, err)
		}
		if w := warn.String(); strings.Count(w, "\n") != 1 || !strings.Contains(w, "software emulation") || !strings.Contains(w, d.Reason) {
			t.Errorf("%s: warning %q; want one line stating the decision", shape, w)
		}
	}
}
