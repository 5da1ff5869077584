package netns

import "net"

// EgressRoom is what a step's egress (netns/egress/gateway) needs of the
// step's network namespace: the firewall, listeners made inside it and the
// firewall's counters. *NS is the real one; tests give fakes. It lives
// with the namespace, so that the gateway, the backends that start it and
// the runner's Egress contract (vmrunner.Egress) share it without the
// network room importing the runner.
type EgressRoom interface {
	SetupEgress(e Egress) error
	Listen(network, address string) (net.Listener, error)
	ListenPacket(network, address string) (net.PacketConn, error)
	EgressCounters() (EgressCounters, error)
}

var _ EgressRoom = (*NS)(nil)
