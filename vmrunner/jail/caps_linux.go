package jail

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// keepCaps are all the jail's init keeps: enough to start the job as its
// own uid and gid (setgroups, setgid, setuid) and to signal its process
// group. The job, running as a non-zero uid, loses even these at setuid.
var keepCaps = []int{unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_KILL}

// dropPrivileges reduces the calling thread to keepCaps in every set and
// sets no_new_privs. Capabilities are per thread: the caller execs from
// this thread so that the whole next image starts with them.
func dropPrivileges() error {
	keep := map[int]bool{}
	var mask [2]uint32
	for _, c := range keepCaps {
		keep[c] = true
		mask[c/32] |= 1 << (uint(c) % 32)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	for c := 0; c <= 63; c++ {
		if keep[c] {
			continue
		}
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the kernel's last capability
		}
		if err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Effective: mask[0], Permitted: mask[0]},
		{Effective: mask[1], Permitted: mask[1]},
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("set capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	return nil
}
