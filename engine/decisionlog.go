package engine

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// logDecisions stores the run's decision log, its admission decision on
// plan as an OPA decision log line (policy.AdmissionEvent), as a blob and
// names it in rec.Policy.DecisionLog. A run makes no other policy decision
// today; any it makes later belongs in the same log. labels.id is the run
// id (it names the run's directory and its state files), requested_by the
// uid agentsandbox runs as, and the input is logged unless it is over
// policy.MaxLoggedInput (its digest is in custom.input_digest either way,
// and the workflow file is pinned in the record).
//
// The input is the one the decision was made on (Decision.Input), or made
// again from plan for a Policy that does not keep it.
func (r *run) logDecisions(rec *record.Record, plan *workflow.Workflow) error {
	if rec.Policy == nil || r.decision == nil {
		return nil
	}
	host := r.o.Host.Policy()
	in := r.decision.Input()
	if in == nil {
		var err error
		if in, err = policy.InputDocument(plan, host); err != nil {
			return fmt.Errorf("write the decision log: %w", err)
		}
	}
	ev, err := policy.AdmissionEvent(r.decision, in, policy.EventOptions{
		ID: r.runID, Version: r.o.ToolVersion, RequestedBy: "uid:" + strconv.Itoa(host.UID), Time: rec.Started,
	})
	if err != nil {
		return fmt.Errorf("write the decision log: %w", err)
	}
	line, err := policy.AppendEvent(nil, ev)
	if err != nil {
		return fmt.Errorf("write the decision log: %w", err)
	}
	d, _, err := r.o.Store.PutBlob(bytes.NewReader(line))
	if err != nil {
		return fmt.Errorf("store the decision log: %w", err)
	}
	rec.Policy.DecisionLog = &d
	return nil
}
