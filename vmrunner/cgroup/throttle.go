package cgroup

// ThrottleWorkspace sets l's IO rates to readBps and writeBps (bytes per
// second; 0 sets no limit) on the block device holding the directory
// workspace, which deviceOf finds (DeviceOf; tests pass a fake). It does
// nothing when both rates are 0. When deviceOf finds no device, its error
// comes back unwrapped, for the caller to say what to change.
func ThrottleWorkspace(l *Limits, readBps, writeBps int64, workspace string, deviceOf func(string) (Device, error)) error {
	if readBps == 0 && writeBps == 0 {
		return nil
	}
	dev, err := deviceOf(workspace)
	if err != nil {
		return err
	}
	l.IOReadBps, l.IOWriteBps, l.IODevices = readBps, writeBps, []Device{dev}
	return nil
}
