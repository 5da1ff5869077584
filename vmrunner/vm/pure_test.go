package vm

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

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
	if got, want := RunnerCommand("/nix/store/r"), []string{"/nix/store/r/bin/microvm-run"}; !reflect.DeepEqual(got, want) {
		t.Errorf("RunnerCommand = %q", got)
	}
	if got, want := ProbeArgs("qemu", "kvm", "/p.bin"), []string{"qemu", "-M", "microvm,x-option-roms=off,isa-serial=off,rtc=off",
		"-accel", "kvm", "-m", "16", "-nodefaults", "-no-user-config", "-display", "none", "-bios", "/p.bin",
		"-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ProbeArgs = %q", got)
	}
}
