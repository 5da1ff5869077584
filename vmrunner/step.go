package vmrunner

import (
	"fmt"

	"github.com/agentsandbox/agentsandbox/fsx/jobfs"
	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// What every backend shares about a step on the host.

// ThrottleWorkspace sets l's IO rates from r's ioRead and ioWrite on the
// block device holding workspace, which deviceOf finds (cgroup.DeviceOf;
// tests pass a fake); it does nothing when r sets neither. A workspace on no
// block device cannot be throttled: the error says what to change in the
// workflow or the host.
func ThrottleWorkspace(l *cgroup.Limits, r workflow.Resources, workspace string, deviceOf func(string) (cgroup.Device, error)) error {
	if err := cgroup.ThrottleWorkspace(l, r.IOReadBps, r.IOWriteBps, workspace, deviceOf); err != nil {
		return fmt.Errorf("throttle disk IO of the workspace %s (ioRead %s, ioWrite %s): the kernel throttles block devices only, and none was found under this path (tmpfs, overlayfs and btrfs have none to name): %w; "+
			"put the workspace on a disk (for apply: a --state-dir on a disk) or remove the step's ioRead and ioWrite",
			workspace, workflow.FormatIORate(r.IOReadBps), workflow.FormatIORate(r.IOWriteBps), err)
	}
	return nil
}

// ReadResult reads the agent's result.json from a control directory. The
// bool is false when there is none (or it cannot be decoded): the job's
// status is then a failure, whatever the sandbox's own exit status says.
//
// The sandbox could write anything there, so it is read as the job's: through
// fsx/jobfs (a regular file, not through a symlink), at most
// guest.MaxResultSize bytes, and decoded strictly (guest.ParseResult).
func ReadResult(controlDir string) (guest.Result, bool, error) {
	root, err := jobfs.Open(controlDir)
	if err != nil {
		return guest.Result{}, false, fmt.Errorf("read result: %w", err)
	}
	defer root.Close()
	b, err := root.ReadFile(guest.ResultFile, guest.MaxResultSize)
	if err != nil {
		return guest.Result{}, false, fmt.Errorf("read result: %w", err)
	}
	res, err := guest.ParseResult(b)
	if err != nil {
		return guest.Result{}, false, err
	}
	return res, true, nil
}
