package record

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxDecisionLog bounds a run's decision log blob when it is checked: a
// run makes a handful of decisions, each a few KiB.
const maxDecisionLog = 64 << 20

// ErrDecisionLog marks a decision log blob that is intact but does not
// hold the record's admission decision.
var ErrDecisionLog = errors.New("the decision log does not hold the record's admission decision")

// checkDecisionLog reads the decision log blob p names (verifying its
// hash) and checks it is JSON lines with a decision_id each, one of which
// is p's admission decision under p's bundle digest. The event format is
// package policy's (DecisionEvent); only the fields checked are read here.
func (s *Store) checkDecisionLog(p *Policy) error {
	rc, err := s.OpenBlob(*p.DecisionLog)
	if err != nil {
		return err
	}
	defer rc.Close()
	sc := bufio.NewScanner(io.LimitReader(rc, maxDecisionLog))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	found := false
	for n := 1; sc.Scan(); n++ {
		var ev struct {
			DecisionID string `json:"decision_id"`
			Bundles    map[string]struct {
				Revision string `json:"revision"`
			} `json:"bundles"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("decision log line %d: %w", n, err)
		}
		if ev.DecisionID == "" {
			return fmt.Errorf("decision log line %d: no decision_id", n)
		}
		if ev.DecisionID == p.DecisionID && ev.Bundles["agentsandbox"].Revision == p.BundleDigest {
			found = true
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read decision log: %w", err)
	}
	// Read to the end so the blob's hash is checked.
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("%w (decision %s, bundle %s)", ErrDecisionLog, p.DecisionID, p.BundleDigest)
	}
	return nil
}
