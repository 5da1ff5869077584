package vmfixture

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/agentsandbox/agentsandbox/microvm"
)

// AccelRef is the -accel value the fixture's microvm-run passes: the ACCEL
// environment variable (kvm or tcg), tcg when unset. The vm backend sets
// ACCEL from its KVM probe.
const AccelRef = "${ACCEL:-tcg}"

// Share is a 9p share of the runner. Source is resolved by qemu against
// microvm-run's working directory when relative.
type Share struct {
	Tag           string
	Source        string
	SecurityModel string // passthrough, none, mapped, mapped-file
	ReadOnly      bool
}

// Interface is a tap interface the runner opens by name (Linux: at most 15
// characters). The host creates the tap before microvm-run starts.
type Interface struct {
	ID  string
	MAC string
}

// Runner describes the fixture's microvm.nix-style qemu runner.
type Runner struct {
	Name         string // hostName: names the VM and its control socket <Name>.sock
	Qemu         string // qemu-system-x86_64 to exec (absolute, like a store path)
	Kernel       string // bzImage
	Initrd       string // newc cpio
	MemMiB       int
	VCPU         int
	KernelParams []string
	Shares       []Share
	Interfaces   []Interface
}

// Socket is the QMP control socket, relative to the VM's working directory.
func (r Runner) Socket() string { return r.Name + ".sock" }

// TapMultiQueue mirrors microvm.nix: taps need multi_queue when vcpu > 1.
func (r Runner) TapMultiQueue() bool { return r.VCPU > 1 }

// QemuArgs is the hypervisor command line microvm-run execs, following
// microvm.nix's qemu runner for -M microvm on x86_64 (stdio serial console,
// -no-reboot, reboot=t panic=-1, 9p shares by tag, tap netdevs, a QMP
// socket, and nixgen's session channel: the virtio-serial port the agent
// serves sessions on, its host end SessionSocket in the working
// directory). Differences, all for the fixture kernel: virtio-mmio devices
// instead of PCI (the modules the initramfs loads), no -enable-kvm/-cpu
// host (accel comes from accel, so the backend can choose), no i8042.
func (r Runner) QemuArgs(accel string) []string {
	mem := r.MemMiB
	if mem <= 0 {
		mem = 256
	}
	vcpu := r.VCPU
	if vcpu <= 0 {
		vcpu = 1
	}
	appendLine := strings.Join(append([]string{"console=ttyS0", "reboot=t", "panic=-1", "quiet"}, r.KernelParams...), " ")
	args := []string{
		r.Qemu,
		"-name", r.Name,
		"-M", "microvm,acpi=on,mem-merge=on,pcie=off,pic=off,pit=off,rtc=on,usb=off",
		"-accel", accel,
		"-cpu", "max",
		"-m", strconv.Itoa(mem) + "M",
		"-smp", strconv.Itoa(vcpu),
		"-nodefaults", "-no-user-config",
		"-no-reboot",
		"-kernel", r.Kernel,
		"-initrd", r.Initrd,
		"-chardev", "stdio,id=stdio,signal=off",
		"-device", "virtio-rng-device",
		"-serial", "chardev:stdio",
		"-append", appendLine,
		"-nographic",
		"-qmp", "unix:" + r.Socket() + ",server,nowait",
	}
	for i, s := range r.Shares {
		sm := s.SecurityModel
		if sm == "" {
			sm = "passthrough"
		}
		args = append(args,
			"-fsdev", fmt.Sprintf("local,id=fs%d,path=%s,security_model=%s,readonly=%t", i, s.Source, sm, s.ReadOnly),
			"-device", fmt.Sprintf("virtio-9p-device,fsdev=fs%d,mount_tag=%s", i, s.Tag),
		)
	}
	args = append(args, microvm.SessionQemuArgs("device")...)
	for _, n := range r.Interfaces {
		netdev := "tap,id=" + n.ID + ",ifname=" + n.ID + ",script=no,downscript=no"
		if r.TapMultiQueue() {
			netdev += ",queues=" + strconv.Itoa(vcpu)
		}
		args = append(args,
			"-netdev", netdev,
			"-device", "virtio-net-device,netdev="+n.ID+",mac="+n.MAC,
		)
	}
	return args
}

// RunScript renders bin/microvm-run: like microvm.nix's, a shell script
// that execs the hypervisor, so its exit status is the hypervisor's. shell
// is the interpreter for the #! line (a static busybox; "sh" is passed as
// its argument).
func (r Runner) RunScript(shell string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#!%s sh\n", shell)
	b.WriteString("# microvm-run for the agentsandbox VM test fixture (see docs/vm.md).\n")
	b.WriteString("# Relative share sources and the control socket resolve against the\n# current directory: run it in the VM's own working directory.\n")
	b.WriteString("set -eu\n")
	b.WriteString("exec")
	for _, a := range r.QemuArgs(AccelRef) {
		b.WriteString(" ")
		if a == AccelRef {
			b.WriteString(`"` + a + `"`)
		} else {
			b.WriteString(ShellQuote(a))
		}
	}
	b.WriteString("\n")
	return b.String()
}

// ShareFiles are the share/microvm files microvm.nix's runner writes,
// relative to the runner's root: hypervisor, tap-flags (one flag a line),
// and tap-interfaces (one id a line) when there are taps.
func (r Runner) ShareFiles() map[string]string {
	flags := "vnet_hdr\n"
	if r.TapMultiQueue() {
		flags += "multi_queue\n"
	}
	files := map[string]string{
		"share/microvm/hypervisor": "qemu\n",
		"share/microvm/tap-flags":  flags,
	}
	if len(r.Interfaces) > 0 {
		var ids strings.Builder
		for _, n := range r.Interfaces {
			ids.WriteString(n.ID + "\n")
		}
		files["share/microvm/tap-interfaces"] = ids.String()
	}
	return files
}

// ShellQuote quotes s for sh when it needs quoting.
func ShellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=+,.:/@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
