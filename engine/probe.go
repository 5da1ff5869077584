package engine

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentsandbox/agentsandbox/nixbuild"
	"github.com/agentsandbox/agentsandbox/nixgen"

	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// KVMProbe reports whether a guest really runs under KVM, and why not.
type KVMProbe func(ctx context.Context) vmrunner.KVMAnswer

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
		a := kvm(ctx)
		h.KVMUsable, h.KVMReason, h.KVMDetail = a.Usable, a.Reason, a.Detail
	}
	return h
}

// nixVersion is `nix --version` of the nix on PATH, and that nix's path,
// or "" when it cannot be had. It runs once per binary for the process's
// life: the realiser's version check and the record share one answer.
func nixVersion(ctx context.Context) (version, path string) {
	p, err := exec.LookPath("nix")
	if err != nil {
		return "", ""
	}
	if v, ok := nixVersions.Load(p); ok {
		return v.(string), p
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, p, "--version").Output()
	if err != nil {
		return "", p
	}
	v := strings.TrimSpace(string(out))
	nixVersions.Store(p, v)
	return v, p
}

// nixVersions caches nixVersion by binary.
var nixVersions sync.Map

// CheckNix refuses, before anything is evaluated, a Nix on PATH older
// than w's generated flake needs (nixgen.RequiredNix, which reads the
// workflow's lock at lockFile for the nixpkgs' age; "" for none). It
// returns a *nixbuild.TooOldError, or nil when the Nix is new enough, when
// nothing needs a newer one, or when there is no Nix (callers say that
// themselves).
func CheckNix(ctx context.Context, w *workflow.Workflow, lockFile string) error {
	var lock []byte
	if lockFile != "" {
		lock, _ = os.ReadFile(lockFile)
	}
	req := nixgen.RequiredNix(w, lock)
	if req.Version == "" {
		return nil
	}
	found, path := nixVersion(ctx)
	if found == "" {
		return nil
	}
	return nixbuild.CheckVersion(found, path, req.Version, strings.Join(req.Why, "; "))
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
