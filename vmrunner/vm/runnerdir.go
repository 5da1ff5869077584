package vm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/agentsandbox/agentsandbox/guest"
)

// RunnerInfo is what the backend reads from a microvm.nix runner.
type RunnerInfo struct {
	Dir           string
	Hypervisor    string   // share/microvm/hypervisor
	Taps          []string // share/microvm/tap-interfaces, one id a line
	TapVnetHdr    bool     // share/microvm/tap-flags has vnet_hdr
	TapMultiQueue bool     // share/microvm/tap-flags has multi_queue
	HasShutdown   bool     // bin/microvm-shutdown exists
	HasVirtiofsd  bool     // bin/virtiofsd-run exists
	// HasSessionPort: microvm-run gives the guest the session channel's
	// port (microvm.SessionQemuArgs), which VM sandboxes need.
	HasSessionPort bool
	// AccelFromEnv: microvm-run takes -accel from $ACCEL (the fixture's
	// runners), so the backend chooses; otherwise BakedAccel is what the
	// runner was built with ("kvm" for -enable-kvm or accel=kvm..., "tcg").
	AccelFromEnv bool
	BakedAccel   string
	// Target is the CPU model and machine microvm-run passes to qemu: what
	// a KVM probe must run with to answer for this runner. TargetUnknown,
	// when set, says why they could not be read: then no probe answers
	// for this runner, and KVM is not proven for it.
	Target        Target
	TargetUnknown string
}

// ReadRunner reads a runner's share/microvm files and scripts.
func ReadRunner(dir string) (RunnerInfo, error) {
	ri := RunnerInfo{Dir: dir}
	run := filepath.Join(dir, "bin", "microvm-run")
	script, err := os.ReadFile(run)
	if err != nil {
		return ri, fmt.Errorf("read runner %s: %w (is it a microvm.nix runner?)", dir, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "share", "microvm", "hypervisor"))
	if err != nil {
		return ri, fmt.Errorf("read runner %s: %w", dir, err)
	}
	ri.Hypervisor = strings.TrimSpace(string(b))
	if b, err := os.ReadFile(filepath.Join(dir, "share", "microvm", "tap-interfaces")); err == nil {
		ri.Taps = strings.Fields(string(b))
	} else if !errors.Is(err, fs.ErrNotExist) {
		return ri, fmt.Errorf("read runner %s: %w", dir, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "share", "microvm", "tap-flags")); err == nil {
		for _, f := range strings.Fields(string(b)) {
			switch f {
			case "vnet_hdr":
				ri.TapVnetHdr = true
			case "multi_queue":
				ri.TapMultiQueue = true
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return ri, fmt.Errorf("read runner %s: %w", dir, err)
	}
	_, err = os.Stat(filepath.Join(dir, "bin", "microvm-shutdown"))
	ri.HasShutdown = err == nil
	_, err = os.Stat(filepath.Join(dir, "bin", "virtiofsd-run"))
	ri.HasVirtiofsd = err == nil
	ri.HasSessionPort = strings.Contains(string(script), "name="+guest.SessionPort)
	ri.AccelFromEnv, ri.BakedAccel = scriptAccel(string(script))
	if ri.Target, err = RunnerTarget(string(script)); err != nil {
		ri.TargetUnknown = fmt.Sprintf("cannot read the CPU model and machine %s passes to qemu: %v", run, err)
	}
	if ri.Hypervisor != "" && ri.Hypervisor != "qemu" {
		// cloud-hypervisor, firecracker and the rest have no software
		// emulation: they need KVM whatever their script says.
		ri.AccelFromEnv, ri.BakedAccel = false, "kvm"
	}
	return ri, nil
}

var accelRE = regexp.MustCompile(`(?:-accel['"]?\s+['"]?|accel=)([a-z:]+)`)

// scriptAccel finds how microvm-run picks its accelerator.
func scriptAccel(script string) (fromEnv bool, baked string) {
	if strings.Contains(script, "${ACCEL") {
		return true, ""
	}
	if strings.Contains(script, "-enable-kvm") {
		return false, "kvm"
	}
	if m := accelRE.FindStringSubmatch(script); m != nil {
		first, _, _ := strings.Cut(m[1], ":")
		return false, first
	}
	return false, "tcg"
}
