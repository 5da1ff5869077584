package netns

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

// Tap is a persistent tap device for a hypervisor.
type Tap struct {
	Name       string // 1 to 15 characters
	Owner      int    // uid allowed to open it (the unprivileged hypervisor)
	Group      int    // gid allowed to open it
	MultiQueue bool   // IFF_MULTI_QUEUE, as qemu's queues= expects
	VnetHdr    bool   // IFF_VNET_HDR, as qemu's vnet_hdr=on expects
}

// CreateTap creates the persistent tap device t inside the namespace,
// owned by t.Owner and t.Group, without packet information headers, and
// leaves it down. The kernel puts a tun device in the namespace of the
// thread that opens /dev/net/tun, so this switches a locked thread in (Do).
func (n *NS) CreateTap(t Tap) (netlink.Link, error) {
	name := t.Name
	if name == "" || len(name) > 15 {
		return nil, fmt.Errorf("create tap %q in netns %q: a device name has 1 to 15 characters", name, n.name)
	}
	if t.Owner < 0 || t.Group < 0 {
		return nil, fmt.Errorf("create tap %q in netns %q: negative owner uid %d or group %d", name, n.name, t.Owner, t.Group)
	}
	flags := netlink.TUNTAP_NO_PI
	if t.MultiQueue {
		flags |= netlink.TUNTAP_MULTI_QUEUE
	}
	if t.VnetHdr {
		flags |= netlink.TUNTAP_VNET_HDR
	}
	tap := &netlink.Tuntap{
		LinkAttrs: netlink.LinkAttrs{Name: name},
		Mode:      netlink.TUNTAP_MODE_TAP,
		Flags:     flags,
		Owner:     uint32(t.Owner),
		Group:     uint32(t.Group),
	}
	var link netlink.Link
	err := n.Do(func() error {
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		if err := h.LinkAdd(tap); err != nil {
			return err
		}
		link, err = h.LinkByName(name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create tap %q in netns %q: %w", name, n.name, err)
	}
	return link, nil
}

// Bandwidth shaping: the token bucket holds at least minBurst bytes or
// 10 ms worth of traffic, and the queue holds tbfLatency of traffic on top.
const (
	minBurst   = 16 << 10
	tbfLatency = 50 // milliseconds
)

// tbf returns the token bucket filter SetBandwidth installs as the root
// qdisc of the device with index linkIndex, shaping egress to bitsPerSecond.
// Its Buffer is in kernel ticks (netlink.Xmittime), not bytes.
func tbf(linkIndex int, bitsPerSecond uint64) (*netlink.Tbf, error) {
	rate := bitsPerSecond / 8 // bytes per second
	if rate == 0 {
		return nil, errors.New("bandwidth must be at least 8 bits per second")
	}
	burst := rate / 100
	if burst < minBurst {
		burst = minBurst
	}
	if burst > 1<<31 {
		burst = 1 << 31
	}
	limit := rate*tbfLatency/1000 + burst
	if limit > 1<<31 {
		limit = 1 << 31
	}
	return &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: linkIndex,
			Handle:    netlink.MakeHandle(1, 0),
			Parent:    netlink.HANDLE_ROOT,
		},
		Rate:   rate,
		Limit:  uint32(limit),
		Buffer: netlink.Xmittime(rate, uint32(burst)),
	}, nil
}

// SetBandwidth shapes what the device link inside the namespace transmits
// to bitsPerSecond with a tbf root qdisc, replacing any root qdisc it had.
// On a VM's tap that is what the host sends to the guest: a tap transmits
// towards the hypervisor, and what the guest sends arrives as the tap's
// ingress, which a root qdisc does not see.
func (n *NS) SetBandwidth(link string, bitsPerSecond uint64) error {
	h, err := n.Handle()
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(link)
	if err != nil {
		return fmt.Errorf("set bandwidth of %q in netns %q: %w", link, n.name, err)
	}
	q, err := tbf(l.Attrs().Index, bitsPerSecond)
	if err != nil {
		return fmt.Errorf("set bandwidth of %q in netns %q: %w", link, n.name, err)
	}
	if err := h.QdiscReplace(q); err != nil {
		return fmt.Errorf("set bandwidth of %q in netns %q: tbf rate %d bit/s: %w", link, n.name, bitsPerSecond, err)
	}
	return nil
}
