package cgroup

import (
	"fmt"

	"github.com/agentsandbox/agentsandbox/workflow"
)

// ThrottleWorkspace sets l's IO rates from r's ioRead and ioWrite, on the
// block device holding workspace; it does nothing when r sets neither.
func ThrottleWorkspace(l *Limits, r workflow.Resources, workspace string, deviceOf func(string) (Device, error)) error {
	if r.IOReadBps == 0 && r.IOWriteBps == 0 {
		return nil
	}
	dev, err := deviceOf(workspace)
	if err != nil {
		return fmt.Errorf("throttle disk IO of the workspace %s (ioRead %s, ioWrite %s): the kernel throttles block devices only, and none was found under this path (tmpfs, overlayfs and btrfs have none to name): %w; "+
			"put the workspace on a disk (for apply: a --state-dir on a disk) or remove the step's ioRead and ioWrite",
			workspace, workflow.FormatIORate(r.IOReadBps), workflow.FormatIORate(r.IOWriteBps), err)
	}
	l.IOReadBps, l.IOWriteBps, l.IODevices = r.IOReadBps, r.IOWriteBps, []Device{dev}
	return nil
}
