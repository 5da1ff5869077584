package vm

import (
	"fmt"

	"github.com/agentsandbox/agentsandbox/netns"
	"golang.org/x/sys/unix"
)

// setTapGroup sets the group of a persistent tap in ns. netns.CreateTap
// sets the owner, but netlink also sets the group to gid 0, and the kernel
// lets a process without CAP_NET_ADMIN attach only when it matches both:
// the unprivileged hypervisor (HypervisorGID) would get EPERM. The flags
// must be the tap's own, since attaching rewrites them.
func setTapGroup(ns *netns.NS, name string, gid int, multiQueue, vnetHdr bool) error {
	flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if multiQueue {
		flags |= unix.IFF_MULTI_QUEUE
	}
	if vnetHdr {
		flags |= unix.IFF_VNET_HDR
	}
	err := ns.Do(func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		ifr.SetUint16(flags)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			return fmt.Errorf("attach: %w", err)
		}
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETGROUP, uintptr(gid)); e != 0 {
			return fmt.Errorf("TUNSETGROUP: %w", e)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("give tap %q in netns %q to group %d: %w", name, ns.Name(), gid, err)
	}
	return nil
}
