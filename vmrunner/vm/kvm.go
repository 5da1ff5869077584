package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentsandbox/agentsandbox/internal/atomicfile"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// DefaultProbeCache caches the KVM probe's answer for this boot. It is
// under /run (gone after a reboot) and also keyed by the boot id.
const DefaultProbeCache = "/run/agentsandbox/kvm-probe.json"

// ProbeTimeout bounds the probe guest. A working KVM runs it in a few
// milliseconds; on a host where the vCPU spins it is cut off here.
const ProbeTimeout = 2 * time.Second

// probeExitCode is qemu's exit status when the probe payload wrote 0x31 to
// the isa-debug-exit port: (0x31 << 1) | 1.
const probeExitCode = 99

// Prober runs the KVM probe. The zero value probes with qemu-system-x86_64
// from PATH and caches in DefaultProbeCache.
type Prober struct {
	Qemu      string        // qemu-system-x86_64 from PATH when empty
	CacheFile string        // DefaultProbeCache when empty; "-" disables the cache
	Timeout   time.Duration // ProbeTimeout when zero
	KVMDevice string        // /dev/kvm when empty
}

// probeCache is the cache file's content.
type probeCache struct {
	BootID string `json:"bootId"`
	Usable bool   `json:"usable"`
	Reason string `json:"reason"`
}

// ProbeKVM reports whether KVM works on this host, using the per-boot cache.
func ProbeKVM(ctx context.Context) (usable bool, reason string) {
	return Prober{}.Probe(ctx)
}

// ProbePayload is the probe guest: 64 KiB of firmware whose reset vector
// writes 0x31 to the isa-debug-exit port at 0xf4 (qemu then exits with
// status 99) and halts. If the vCPU never executes it, qemu runs until the
// time limit.
func ProbePayload() []byte {
	b := bytes.Repeat([]byte{0xf4}, 64<<10) // hlt
	code := []byte{
		0xb0, 0x31, // mov al, 0x31
		0xe6, 0xf4, // out 0xf4, al
		0xf4,       // hlt
		0xeb, 0xfd, // jmp back to hlt
	}
	copy(b[len(b)-16:], code) // the reset vector, 16 bytes below 4 GiB
	return b
}

// ProbeArgs is the probe's qemu command line for accel with the payload in
// bios.
func ProbeArgs(qemu, accel, bios string) []string {
	return []string{qemu,
		"-M", "microvm,x-option-roms=off,isa-serial=off,rtc=off",
		"-accel", accel,
		"-m", "16",
		"-nodefaults", "-no-user-config", "-display", "none",
		"-bios", bios,
		"-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
	}
}

// Probe opens the KVM device and runs the probe payload under -accel kvm
// with a time limit. The answer is cached per boot (by
// /proc/sys/kernel/random/boot_id).
func (p Prober) Probe(ctx context.Context) (bool, string) {
	cache := p.CacheFile
	if cache == "" {
		cache = DefaultProbeCache
	}
	bootID := readBootID()
	if cache != "-" && bootID != "" {
		if b, err := os.ReadFile(cache); err == nil {
			var c probeCache
			if json.Unmarshal(b, &c) == nil && c.BootID == bootID {
				return c.Usable, c.Reason
			}
		}
	}
	usable, reason := p.probe(ctx, "kvm")
	if ctx.Err() != nil {
		return false, "probe cancelled: " + ctx.Err().Error()
	}
	if cache != "-" && bootID != "" {
		b, _ := json.Marshal(probeCache{BootID: bootID, Usable: usable, Reason: reason})
		if err := os.MkdirAll(filepath.Dir(cache), 0o755); err == nil {
			_ = atomicfile.WriteFile(cache, append(b, '\n'), 0o644)
		}
	}
	return usable, reason
}

// ProbeAccel runs the probe payload under accel without the cache or the
// device check; tests use it with "tcg" to show the payload itself works.
func (p Prober) ProbeAccel(ctx context.Context, accel string) (bool, string) {
	return p.run(ctx, accel)
}

func (p Prober) probe(ctx context.Context, accel string) (bool, string) {
	dev := p.KVMDevice
	if dev == "" {
		dev = "/dev/kvm"
	}
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return false, fmt.Sprintf("cannot open %s: %v", dev, err)
	}
	f.Close()
	return p.run(ctx, accel)
}

func (p Prober) run(ctx context.Context, accel string) (bool, string) {
	qemu := p.Qemu
	if qemu == "" {
		var err error
		if qemu, err = exec.LookPath("qemu-system-x86_64"); err != nil {
			return false, "qemu-system-x86_64 not found (apt-get install qemu-system-x86)"
		}
	}
	timeout := p.Timeout
	if timeout == 0 {
		timeout = ProbeTimeout
	}
	dir, err := os.MkdirTemp("", "asb-kvm-probe-")
	if err != nil {
		return false, "probe: " + err.Error()
	}
	defer os.RemoveAll(dir)
	bios := filepath.Join(dir, "probe.bin")
	if err := os.WriteFile(bios, ProbePayload(), 0o644); err != nil {
		return false, "probe: " + err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	argv := ProbeArgs(qemu, accel, bios)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return false, fmt.Sprintf("a probe guest under -accel %s did not run within %v (the vCPU never executed its first instructions)", accel, timeout)
	case errors.As(err, &ee) && ee.ExitCode() == probeExitCode:
		return true, fmt.Sprintf("a probe guest ran under -accel %s", accel)
	case err == nil:
		return false, fmt.Sprintf("the probe guest under -accel %s exited without running its payload", accel)
	default:
		return false, fmt.Sprintf("qemu -accel %s failed: %v: %s", accel, err, strings.TrimSpace(out.String()))
	}
}

func readBootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
