package vmfixture

import (
	"bytes"
	"io/fs"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// readNewc parses a newc archive back into name → mode, body.
func readNewc(t *testing.T, b []byte) map[string][2]string {
	t.Helper()
	out := map[string][2]string{}
	off := 0
	align := func() { off = (off + 3) &^ 3 }
	for {
		if string(b[off:off+6]) != "070701" {
			t.Fatalf("bad magic at %d", off)
		}
		field := func(i int) int {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return int(v)
		}
		mode, size, namesize := field(1), field(6), field(11)
		name := string(b[off+110 : off+110+namesize-1])
		off += 110 + namesize
		align()
		body := string(b[off : off+size])
		off += size
		align()
		if name == "TRAILER!!!" {
			return out
		}
		out[name] = [2]string{strconv.FormatInt(int64(mode), 8), body}
	}
}

func TestArchiveRoundTrip(t *testing.T) {
	a := NewArchive()
	a.File("init", 0o755, []byte("#!/bin/sh\n"))
	a.Symlink("bin/sh", "/bin/busybox")
	a.CharDev("dev/console", 0o600, 5, 1)
	a.Dir("tmp", 0o1777|fs.ModeSticky)
	a.File("etc/agentsandbox/modules", 0o644, []byte("/lib/modules/9p.ko\n"))
	var buf bytes.Buffer
	if _, err := a.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	got := readNewc(t, buf.Bytes())
	want := map[string][2]string{
		"bin":                      {"40755", ""},
		"bin/sh":                   {"120777", "/bin/busybox"},
		"dev":                      {"40755", ""},
		"dev/console":              {"20600", ""},
		"etc":                      {"40755", ""},
		"etc/agentsandbox":         {"40755", ""},
		"etc/agentsandbox/modules": {"100644", "/lib/modules/9p.ko\n"},
		"init":                     {"100755", "#!/bin/sh\n"},
		"tmp":                      {"40777", ""},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("archive = %v\nwant      %v", got, want)
	}
	var again bytes.Buffer
	a.WriteTo(&again)
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Error("two writes of the same archive differ")
	}
}

func TestQemuArgs(t *testing.T) {
	r := Runner{
		Name: "vm1", Qemu: "/usr/bin/qemu-system-x86_64", Kernel: "/r/kernel", Initrd: "/r/initrd",
		MemMiB: 300, VCPU: 2, KernelParams: []string{"tsc_early_khz=1000"},
		Shares:     []Share{{Tag: "asb-control", Source: "./control"}, {Tag: "ro", Source: "/x", SecurityModel: "none", ReadOnly: true}},
		Interfaces: []Interface{{ID: "tap0", MAC: "02:00:00:00:00:01"}},
	}
	want := []string{"/usr/bin/qemu-system-x86_64", "-name", "vm1",
		"-M", "microvm,acpi=on,mem-merge=on,pcie=off,pic=off,pit=off,rtc=on,usb=off",
		"-accel", "tcg", "-cpu", "max", "-m", "300M", "-smp", "2", "-nodefaults", "-no-user-config", "-no-reboot",
		"-kernel", "/r/kernel", "-initrd", "/r/initrd", "-chardev", "stdio,id=stdio,signal=off",
		"-device", "virtio-rng-device", "-serial", "chardev:stdio",
		"-append", "console=ttyS0 reboot=t panic=-1 quiet tsc_early_khz=1000", "-nographic",
		"-qmp", "unix:vm1.sock,server,nowait",
		"-fsdev", "local,id=fs0,path=./control,security_model=passthrough,readonly=false",
		"-device", "virtio-9p-device,fsdev=fs0,mount_tag=asb-control",
		"-fsdev", "local,id=fs1,path=/x,security_model=none,readonly=true",
		"-device", "virtio-9p-device,fsdev=fs1,mount_tag=ro",
		"-chardev", "socket,id=asbsession,path=session.sock,server=on,wait=off",
		"-device", "virtio-serial-device,id=asbserial",
		"-device", "virtserialport,bus=asbserial.0,chardev=asbsession,name=org.agentsandbox.session",
		"-netdev", "tap,id=tap0,ifname=tap0,script=no,downscript=no,queues=2",
		"-device", "virtio-net-device,netdev=tap0,mac=02:00:00:00:00:01",
	}
	if got := r.QemuArgs("tcg"); !reflect.DeepEqual(got, want) {
		t.Errorf("QemuArgs =\n%q\nwant\n%q", got, want)
	}
	script := r.RunScript("/bb/busybox")
	if !strings.HasPrefix(script, "#!/bb/busybox sh\n") || !strings.Contains(script, `-accel "${ACCEL:-tcg}"`) ||
		!strings.Contains(script, "-append 'console=ttyS0 reboot=t panic=-1 quiet tsc_early_khz=1000'") {
		t.Errorf("RunScript:\n%s", script)
	}
	files := r.ShareFiles()
	if files["share/microvm/tap-interfaces"] != "tap0\n" || files["share/microvm/tap-flags"] != "vnet_hdr\nmulti_queue\n" || files["share/microvm/hypervisor"] != "qemu\n" {
		t.Errorf("ShareFiles = %q", files)
	}
}

func TestParseKernelDepends(t *testing.T) {
	got, err := parseKernelDepends("linux-image-amd64\n  Depends: linux-image-6.1.0-57-amd64\n")
	if err != nil || got != "linux-image-6.1.0-57-amd64" {
		t.Errorf("parseKernelDepends = %q, %v", got, err)
	}
	if _, err := parseKernelDepends("linux-image-amd64\n"); err == nil {
		t.Error("no Depends line: no error")
	}
}

// TestLoadOrder reads the real Debian kernel's modules (vm tier).
func TestLoadOrder(t *testing.T) {
	k, err := FindKernel(CacheDir())
	if err != nil {
		testtier.Skip(t, "vm", err.Error())
	}
	mods, err := LoadOrder(k.ModulesDir, DefaultModules)
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, m := range mods {
		pos[m.Name] = i
	}
	for _, m := range mods {
		for _, d := range m.Depends {
			if pi, ok := pos[d]; ok && pi > pos[m.Name] {
				t.Errorf("%s loads before its dependency %s", m.Name, d)
			}
		}
	}
	for _, n := range []string{"virtio_ring", "virtio", "virtio_mmio", "netfs", "fscache", "9pnet", "9pnet_virtio", "9p", "virtio_net", "net_failover", "failover", "virtio_console"} {
		if _, ok := pos[n]; !ok {
			t.Errorf("module %s missing from %v", n, mods)
		}
	}
}
