package engine

import (
	"fmt"

	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Host is what the runner knows about this machine.
type Host struct {
	Kernel     string
	Arch       string
	CgroupMode string
	Nix        bool   // nix is installed
	NixVersion string // `nix --version`, filled in by Run when Nix realises something
	QEMU       bool   // qemu-system-x86_64 is installed
	KVMUsable  bool   // a guest really runs under KVM (probed, cached per boot)
	KVMReason  string // why not, when it is not: one line
	KVMDetail  string // qemu's own last lines, when the probe saw it fail
	Root       bool   // running as uid 0 (the jail needs it)
	UID        int
	// Capacity, when set, gives the policy what this host can give one
	// sandbox (input.host.capacity), at each admission: serve sets it
	// (CapacityOf) for its API callers' creates and runs; apply, validate
	// and plan leave it nil.
	Capacity func() *policy.Capacity
}

// Record is the host part of an execution record.
func (h Host) Record() record.Host {
	r := record.Host{Kernel: h.Kernel, Arch: h.Arch, CgroupMode: h.CgroupMode, KVMUsable: h.KVMUsable, Nix: h.NixVersion}
	if !h.KVMUsable && h.KVMReason != "not probed" {
		r.KVMReason = vmrunner.KVMAnswer{Reason: h.KVMReason, Detail: h.KVMDetail}.Full()
	}
	return r
}

// Policy is the host part of the policy input document.
func (h Host) Policy() policy.Host {
	p := policy.Host{Nix: h.Nix, KVM: h.KVMUsable, UID: h.UID}
	if h.Capacity != nil {
		p.Capacity = h.Capacity()
	}
	if h.Root {
		p.Isolation = append(p.Isolation, string(workflow.IsolationNamespace))
	}
	if h.Root && h.Nix && h.QEMU {
		p.Isolation = append(p.Isolation, string(workflow.IsolationVM))
		p.Hypervisors = append(p.Hypervisors, string(workflow.HypervisorQEMU))
	}
	return p
}

// why explains, for an error, why an isolation level is missing.
func (h Host) why(iso workflow.Isolation) string {
	switch {
	case !h.Root:
		return " (it needs root for namespaces and cgroups; run as root)"
	case iso == workflow.IsolationVM && !h.QEMU:
		return " (qemu-system-x86_64 is not installed: apt-get install qemu-system-x86)"
	case iso == workflow.IsolationVM && !h.Nix:
		return fmt.Sprintf(" (it needs Nix: %v)", ErrNoNix)
	}
	return ""
}
