package engine

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
)

// KVMProbe reports whether a guest really runs under KVM, and why not.
type KVMProbe func(ctx context.Context) (usable bool, reason string)

// ProbeHost gathers the host facts apply and policy need. kvm may be nil,
// which reports KVM as unusable without trying (validate and plan use that
// to stay fast when no cached probe exists).
func ProbeHost(ctx context.Context, kvm KVMProbe) Host {
	h := Host{
		Arch:       runtime.GOARCH,
		Kernel:     kernelRelease(),
		CgroupMode: cgroup.Mode(),
		UID:        os.Getuid(),
		Root:       os.Geteuid() == 0,
	}
	// Only presence here: `nix --version` costs tens of milliseconds, and
	// the record wants the version only when Nix realised something (see
	// nixVersion, called by Run).
	if _, err := exec.LookPath("nix"); err == nil {
		h.Nix = true
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err == nil {
		h.QEMU = true
	}
	h.KVMReason = "not probed"
	if kvm != nil {
		h.KVMUsable, h.KVMReason = kvm(ctx)
	}
	return h
}

// nixVersion is `nix --version`, or "" when it cannot be had.
func nixVersion(ctx context.Context) string {
	p, err := exec.LookPath("nix")
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, p, "--version").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func kernelRelease() string {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return ""
	}
	b := make([]byte, 0, len(u.Release))
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(bytes.TrimSpace(b))
}
