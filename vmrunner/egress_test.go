package vmrunner_test

import (
	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/netns/egress/gateway"
	"github.com/agentsandbox/agentsandbox/vmrunner"
)

// The gateway implements the runner's Egress without importing the
// runner (it sits in the network room, below it), and the namespace is
// the room it starts in: the compiler checks both here.
var (
	_ vmrunner.Egress  = (*gateway.Gateway)(nil)
	_ netns.EgressRoom = (*netns.NS)(nil)
)
