package vm

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"

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
		TapMultiQueue: true, HasShutdown: true, BakedAccel: "kvm"}
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
	got := Limits(workflow.Resources{VCPU: 2, Memory: 1000 << 20})
	if got.MemoryBytes != 1000<<20+256<<20+100<<20 || got.VCPU != 3 || got.PIDs != HypervisorPIDs {
		t.Errorf("Limits = %+v", got)
	}
	if d := Limits(workflow.Resources{}); d.MemoryBytes != DefaultGuestMemory+256<<20+DefaultGuestMemory/10 || d.VCPU != 2 {
		t.Errorf("default Limits = %+v", d)
	}
}

func TestCommandsAreData(t *testing.T) {
	if got, want := RunnerCommand("/nix/store/r"), []string{"/nix/store/r/bin/microvm-run"}; !reflect.DeepEqual(got, want) {
		t.Errorf("RunnerCommand = %q", got)
	}
	if got, want := ProbeArgs("qemu", "kvm", "/p.bin"), []string{"qemu", "-M", "microvm,x-option-roms=off,isa-serial=off,rtc=off",
		"-accel", "kvm", "-m", "16", "-nodefaults", "-no-user-config", "-display", "none", "-bios", "/p.bin",
		"-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ProbeArgs = %q", got)
	}
}
