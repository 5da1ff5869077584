// limits.go holds what bounds the hypervisor: its cgroup limits (guest
// memory plus overhead, vCPUs, pids, the workspace disk's IO rates) and
// its rlimits in the jail.

package vm

import (
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/vmrunner/jail/jailwire"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Defaults of the hypervisor's limits.
const (
	// DefaultGuestMemory is the guest memory assumed when the step sets none.
	DefaultGuestMemory = 512 << 20
	// MemoryOverheadFixed and MemoryOverheadPercent size the hypervisor's
	// cgroup: guest memory + 256 MiB + 10 % for qemu itself, its device
	// model, 9p buffers and the page cache of the kernel and initrd.
	MemoryOverheadFixed   = 256 << 20
	MemoryOverheadPercent = 10
	// HypervisorPIDs caps the hypervisor's threads (the guest's own pids
	// limit is the guest kernel's business).
	HypervisorPIDs = 512
)

// Limits are the hypervisor's cgroup limits for a step whose workspace is
// the directory workspace: guest memory plus the overhead, the vCPUs plus
// one CPU for qemu's I/O threads, and the step's disk IO rates on the block
// device holding the workspace, which deviceOf finds (cgroup.DeviceOf;
// tests pass a fake). The hypervisor does the guest's workspace IO through
// its 9p share on that device, so throttling the hypervisor throttles the
// job. A workspace on no block device (tmpfs, overlayfs, btrfs) cannot be
// throttled, and Limits fails rather than let the step run unthrottled.
func Limits(r workflow.Resources, workspace string, deviceOf func(string) (cgroup.Device, error)) (cgroup.Limits, error) {
	vcpu := r.VCPU
	if vcpu <= 0 {
		vcpu = 1
	}
	l := cgroup.Limits{
		MemoryBytes: hypervisorMemory(r),
		VCPU:        vcpu + 1,
		PIDs:        HypervisorPIDs,
	}
	// The hypervisor serves the guest's 9p workspace share: its IO to that
	// disk is the step's.
	if err := vmrunner.ThrottleWorkspace(&l, r, workspace, deviceOf); err != nil {
		return cgroup.Limits{}, err
	}
	return l, nil
}

// hypervisorMemory is the hypervisor's memory limit: guest memory plus the
// overhead.
func hypervisorMemory(r workflow.Resources) int64 {
	mem := r.Memory
	if mem <= 0 {
		mem = DefaultGuestMemory
	}
	return mem + MemoryOverheadFixed + mem*MemoryOverheadPercent/100
}

// HypervisorRlimits bound the hypervisor in its jail. Every file it writes
// for the guest (the agent's logs and result in the control share, the
// job's files in the workspace) is the guest's doing, so no one file may
// grow past the step's disk; qemu's memfd guest memory (microvm.nix backs
// 9p shares with it) is a file too, hence the guest memory on top.
func HypervisorRlimits(r workflow.Resources) jailwire.Rlimits {
	disk := r.Disk
	if disk <= 0 {
		disk = workflow.DefaultDisk
	}
	return jailwire.Rlimits{FSize: uint64(disk + hypervisorMemory(r))}
}
