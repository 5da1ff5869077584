package engine

import (
	"context"
	"strconv"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/fakebackend"
	"github.com/agentsandbox/agentsandbox/policy"
)

// TestRunStoresDecisionLog: the record names a blob with the admission as
// an OPA decision log line, which verify checks.
func TestRunStoresDecisionLog(t *testing.T) {
	f := newFixture(t, pipelineYAML)
	o := f.options(t, fakebackend.New(), nil)
	res, err := Run(context.Background(), f.w, o)
	if err != nil {
		t.Fatal(err)
	}
	p := res.Record.Policy
	if p == nil || p.DecisionLog == nil {
		t.Fatalf("record policy %+v names no decision log", p)
	}
	rc, err := f.store.OpenBlob(*p.DecisionLog)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	evs, err := policy.DecodeDecisionLog(rc)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 {
		t.Fatalf("%d events, want the admission only", len(evs))
	}
	ev := evs[0]
	if ev.DecisionID != p.DecisionID || ev.BundleRevision() != p.BundleDigest || ev.Custom["input_digest"] != p.InputDigest {
		t.Errorf("event %s %s %v, record %+v", ev.DecisionID, ev.BundleRevision(), ev.Custom, p)
	}
	if ev.Path != policy.AdmissionPath || ev.Labels["version"] != "test" || ev.Labels["type"] != "agentsandbox" || ev.Labels["id"] == "" || len(ev.Input) == 0 {
		t.Errorf("event %+v", ev)
	}
	if ev.RequestedBy != "uid:"+strconv.Itoa(o.Host.Policy().UID) || !ev.Timestamp.Equal(res.Record.Started) {
		t.Errorf("requested_by %q at %v, record started %v", ev.RequestedBy, ev.Timestamp, res.Record.Started)
	}
	if problems, err := f.store.Verify(res.ID); err != nil || len(problems) != 0 {
		t.Errorf("verify: %v %v", problems, err)
	}
}
