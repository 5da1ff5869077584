// egress.go holds the start of a step's egress on the runner's one tap,
// with the tap shaped to the step's bandwidth.

package vm

import (
	"errors"
	"fmt"

	"github.com/agentsandbox/agentsandbox/microvm"
	"github.com/agentsandbox/agentsandbox/vmrunner"
)

// startEgress opens the step's egress on the runner's one tap in the
// step's namespace ns, and shapes what the tap sends the guest to the
// step's bandwidth. On error nothing of the egress is left running.
func startEgress(ns vmrunner.NetRoom, spec vmrunner.StepSpec, ri RunnerInfo) error {
	switch len(ri.Taps) {
	case 1:
	case 0:
		return fmt.Errorf("the step has network.allow, and runner %s has no tap interface (share/microvm/tap-interfaces) to carry it: "+
			"the runner was built without egress; rebuild the step's runner from this workflow (nixgen gives a step with network.allow the tap %s)", spec.Runner, microvm.TapID)
	default:
		return fmt.Errorf("the step has network.allow, and runner %s has %d tap interfaces %q: egress serves exactly one; "+
			"rebuild the step's runner from this workflow (nixgen gives it the one tap %s)", spec.Runner, len(ri.Taps), ri.Taps, microvm.TapID)
	}
	tap := ri.Taps[0]
	if err := spec.Egress.Start(ns, tap); err != nil {
		return err
	}
	if bw := spec.Step.Resources.Bandwidth; bw > 0 {
		if err := ns.SetBandwidth(tap, uint64(bw)); err != nil {
			return errors.Join(fmt.Errorf("shape the guest's tap to resources.bandwidth: %w", err), spec.Egress.Stop())
		}
	}
	return nil
}
