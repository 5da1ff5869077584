package record

import (
	"errors"
	"strings"
	"testing"
)

func TestVerifyChecksDecisionLog(t *testing.T) {
	s := newStore(t)
	_, base := putWithBlobs(t, s)
	line := func(id, rev string) string {
		return `{"labels":{"type":"agentsandbox"},"decision_id":"` + id + `","bundles":{"agentsandbox":{"revision":"` + rev + `"}},"path":"agentsandbox","timestamp":"2026-11-30T12:00:00Z"}` + "\n"
	}
	withLog := func(content string) ID {
		t.Helper()
		d, _, err := s.PutBlob(strings.NewReader(content))
		if err != nil {
			t.Fatal(err)
		}
		r := *base
		p := *base.Policy
		p.DecisionLog = &d
		r.Policy = &p
		id, err := s.Put(&r)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	pol := base.Policy
	good := withLog(line(pol.DecisionID, pol.BundleDigest) + line("other", pol.BundleDigest))
	if problems, err := s.Verify(good); err != nil || len(problems) != 0 {
		t.Fatalf("intact decision log: %v %v", problems, err)
	}
	for name, c := range map[string]struct {
		content string
		want    error
	}{
		"other decision": {line("d-2", pol.BundleDigest), ErrDecisionLog},
		"other bundle":   {line(pol.DecisionID, "sha256:ff"), ErrDecisionLog},
		"not json":       {"decision\n", nil},
	} {
		id := withLog(c.content)
		problems, err := s.Verify(id)
		if err != nil || len(problems) != 1 || problems[0].What != "policy decision log" {
			t.Errorf("%s: %v %v", name, problems, err)
			continue
		}
		if c.want != nil && !errors.Is(problems[0].Err, c.want) {
			t.Errorf("%s: %v, want %v", name, problems[0].Err, c.want)
		}
	}
	// A changed blob is a hash mismatch, reported once.
	r, _ := s.Get(good)
	flipByte(t, s.BlobPath(*r.Policy.DecisionLog), 2)
	problems, err := s.Verify(good)
	if err != nil || len(problems) != 1 || !errors.Is(problems[0].Err, ErrHashMismatch) {
		t.Errorf("changed decision log: %v %v", problems, err)
	}
}
