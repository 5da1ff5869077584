package main

import (
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
)

// TestApplyRecordsDecisionLog: a real apply's record names a blob with its
// admission as an OPA decision log line, under the record's decision id
// and bundle digest, and verify checks it. A second apply of the same
// workflow reads the decision from the decision cache, and its record
// and log line say so.
func TestApplyRecordsDecisionLog(t *testing.T) {
	testtier.Root(t)
	state := t.TempDir()
	code, out, stderr := execute(t, "apply", "--isolation", "namespace", "--state-dir", state, "../../examples/hello.yaml")
	if code != ExitOK {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, stderr)
	}
	s, err := record.OpenStore(state)
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Resolve(lastLine(out))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := s.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	p := rec.Policy
	if p == nil || p.DecisionLog == nil {
		t.Fatalf("the record's policy names no decision log: %+v", p)
	}
	rc, err := s.OpenBlob(*p.DecisionLog)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	evs, err := policy.DecodeDecisionLog(rc)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 {
		t.Fatalf("%d decisions in the log, want the admission", len(evs))
	}
	ev := evs[0]
	if ev.DecisionID != p.DecisionID || ev.BundleRevision() != p.BundleDigest {
		t.Errorf("log line decision %s bundle %s; record decision %s bundle %s", ev.DecisionID, ev.BundleRevision(), p.DecisionID, p.BundleDigest)
	}
	if ev.Labels["version"] != toolVersion() || ev.Path != policy.AdmissionPath || !strings.Contains(string(ev.Input), `"name":"hello"`) {
		t.Errorf("log line: %+v input %s", ev, ev.Input)
	}
	if code, vout, verr := execute(t, "records", "verify", "--state-dir", state, id.String()); code != ExitOK {
		t.Fatalf("verify: exit %d\n%s%s", code, vout, verr)
	}
	if code, sout, serr := execute(t, "records", "show", "--state-dir", state, id.String()); code != ExitOK || !strings.Contains(sout, "decision log "+p.DecisionLog.String()) {
		t.Errorf("show: exit %d, want the decision log's digest\n%s%s", code, sout, serr)
	}
	if p.Cached || ev.Custom["cached"] != nil {
		t.Errorf("the first apply's decision is marked cached: %+v %v", p, ev.Custom)
	}

	code, out, stderr = execute(t, "apply", "--isolation", "namespace", "--state-dir", state, "../../examples/hello.yaml")
	if code != ExitOK {
		t.Fatalf("second apply: exit %d\n%s\n%s", code, out, stderr)
	}
	id2, err := s.Resolve(lastLine(out))
	if err != nil {
		t.Fatal(err)
	}
	rec2, err := s.Get(id2)
	if err != nil {
		t.Fatal(err)
	}
	p2 := rec2.Policy
	if p2 == nil || !p2.Cached || p2.DecisionID != p.DecisionID || p2.DecisionLog == nil {
		t.Fatalf("second apply's policy: %+v, want the cached decision %s", p2, p.DecisionID)
	}
	rc2, err := s.OpenBlob(*p2.DecisionLog)
	if err != nil {
		t.Fatal(err)
	}
	defer rc2.Close()
	evs2, err := policy.DecodeDecisionLog(rc2)
	if err != nil || len(evs2) != 1 || evs2[0].Custom["cached"] != true || evs2[0].DecisionID != p.DecisionID {
		t.Fatalf("second apply's decision log: %v %+v", err, evs2)
	}
	if code, vout, verr := execute(t, "records", "verify", "--state-dir", state, id2.String()); code != ExitOK {
		t.Fatalf("verify of the cached admission's record: exit %d\n%s%s", code, vout, verr)
	}
}
