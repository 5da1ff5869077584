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
	id, p, ev := admissionOf(t, state, out)
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
	id2, p2, ev2 := admissionOf(t, state, out)
	if !p2.Cached || p2.DecisionID != p.DecisionID {
		t.Fatalf("second apply's policy: %+v, want the cached decision %s", p2, p.DecisionID)
	}
	if ev2.Custom["cached"] != true || ev2.DecisionID != p.DecisionID {
		t.Fatalf("second apply's decision log line: %+v", ev2)
	}
	if code, vout, verr := execute(t, "records", "verify", "--state-dir", state, id2.String()); code != ExitOK {
		t.Fatalf("verify of the cached admission's record: exit %d\n%s%s", code, vout, verr)
	}
}

// admissionOf reads the record apply printed the id of (the last line of
// out) from the state directory, and its decision log's one line.
func admissionOf(t *testing.T, state, out string) (record.ID, *record.Policy, policy.DecisionEvent) {
	t.Helper()
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
	return id, p, evs[0]
}
