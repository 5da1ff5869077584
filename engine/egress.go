package engine

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/netns/egress/gateway"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Upstream is how a step's egress proxy reaches the internet from the
// host. The zero value uses the host's resolver and dialer; tests give
// functions that reach a network namespace playing the internet.
type Upstream struct {
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	Dial    func(ctx context.Context, network, address string) (net.Conn, error)
	// HostAddrs are the own addresses of where Dial dials from, refused
	// upstream unless the policy data opens them; nil: this process's
	// network namespace's (egress/hostaddr).
	HostAddrs egress.HostAddrs
}

// stepEgress returns the gateway of a step with network.allow, or nil.
// The rules are the step's network.allow, the admitted policy's
// forbidden list and the internal destinations it opens; the bandwidth is resources.bandwidth (bits per second)
// in bytes per second.
func (r *run) stepEgress(step workflow.Step) (*gateway.Gateway, error) {
	if !step.Network.HasEgress() {
		return nil, nil
	}
	var op egress.Operator
	if r.decision != nil {
		op = egress.Operator{Deny: r.decision.EgressDeny, Internal: r.decision.EgressInternal}
	}
	rules, err := op.Rules(step.Network.Allow)
	if err != nil {
		return nil, fmt.Errorf("step %q: network.allow: %w", step.Name, err)
	}
	return gateway.New(gateway.Config{
		Step: step.Name, Rules: rules,
		Bandwidth: step.Resources.Bandwidth / 8,
		Resolve:   r.o.Upstream.Resolve,
		Dial:      r.o.Upstream.Dial,
		HostAddrs: r.o.Upstream.HostAddrs,
		OnConn: func(c egress.Conn) {
			if !c.Allow {
				r.emit(Event{Time: time.Now(), Kind: EventWarning, Step: step.Name, Line: "network: denied " + c.Reason})
			}
		},
	})
}

// recordEgress stores the step's audit log as a blob and names it, with
// its counts, in the step's record.
func (r *run) recordEgress(step workflow.Step, gw *gateway.Gateway, deny []string, sr *record.Step) error {
	if gw == nil {
		return nil
	}
	log := gw.Log()
	lines, err := egress.ReadLog(bytes.NewReader(log))
	if err != nil {
		return fmt.Errorf("step %q: read its network log: %w", step.Name, err)
	}
	d, _, err := r.o.Store.PutBlob(bytes.NewReader(log))
	if err != nil {
		return fmt.Errorf("step %q: store its network log: %w", step.Name, err)
	}
	s := egress.Summarize(lines)
	sr.Network = &record.Network{
		Allow: step.Network.Allow, Deny: deny,
		Bandwidth: step.Resources.Bandwidth / 8,
		Log:       d,
		Allowed:   s.Allowed, Denied: s.Denied, Failed: s.Failed,
		Queries: s.Queries, NXDomain: s.NXDomain, Dropped: s.Dropped,
		BytesOut: s.BytesOut, BytesIn: s.BytesIn,
	}
	return nil
}
