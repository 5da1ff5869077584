package vmrunner

import "github.com/agentsandbox/agentsandbox/netns"

// Egress is a step's network egress (netns/egress/gateway.Gateway): the
// firewall, resolver and proxy of its room. A backend starts it once the
// step's network namespace (and, for a VM, its tap) exists and before the
// job can run, and stops it once the job has ended and before the
// namespace is deleted. A step without network.allow has none.
type Egress interface {
	// Start opens the room (the step's namespace, netns.EgressRoom): tap
	// is the VM's tap in the namespace, or "" for a namespace jail.
	Start(room netns.EgressRoom, tap string) error
	// Stop closes every connection, logs it, and reads the firewall's
	// drop counters. It is safe to call without Start and more than once.
	Stop() error
}

// Shaper is what the vm backend needs of a step's network namespace to
// shape a guest's traffic on its tap: *netns.NS is the real one. The tbf
// it installs shapes what the tap transmits, which is what the host sends
// to the guest; the proxy's token bucket limits both directions of every
// TCP connection (docs/network.md, Bandwidth).
type Shaper interface {
	SetBandwidth(link string, bitsPerSecond uint64) error
}

// NetRoom is a step's network namespace as its egress needs it: the room
// the egress opens in, and the shaping of a VM's tap. *netns.NS is the
// real one; the step's sandbox holds it as vmrunner/sandbox.Netns, which
// includes it, so neither backend has to ask what it was given.
type NetRoom interface {
	netns.EgressRoom
	Shaper
}
