package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// Canonical returns the workflow's canonical form: compact JSON of the
// defaulted workflow (see types.go for the keys), steps sorted by name,
// lists sorted and unique, absent lists and maps written as [] and {}, and
// no HTML escaping. Two files that mean the same workflow have the same
// canonical bytes, whatever their comments, key order, quoting or spacing.
func (w *Workflow) Canonical() ([]byte, error) {
	c := *w
	c.Inputs = append([]Input{}, w.Inputs...)
	sort.Slice(c.Inputs, func(i, j int) bool { return c.Inputs[i].Name < c.Inputs[j].Name })
	c.Steps = make([]Step, len(w.Steps))
	for i, s := range w.Steps {
		s.Packages = sortedUnique(s.Packages)
		s.Needs = sortedUnique(s.Needs)
		s.Inputs = sortedUnique(s.Inputs)
		s.Outputs = sortedUnique(s.Outputs)
		s.Network.Allow = sortedUnique(s.Network.Allow)
		s.DeterministicOutputs = sortedUnique(s.DeterministicOutputs)
		if s.Env == nil {
			s.Env = map[string]string{}
		}
		c.Steps[i] = s
	}
	sort.SliceStable(c.Steps, func(i, j int) bool { return c.Steps[i].Name < c.Steps[j].Name })
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&c); err != nil {
		return nil, fmt.Errorf("encode canonical workflow: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Hash returns the sha256 of the canonical form: the workflow's identity.
// (Encoding these plain types cannot fail; if it ever did, Hash would be
// the hash of nothing, which no workflow has.)
func (w *Workflow) Hash() Hash {
	b, err := w.Canonical()
	if err != nil {
		return HashOf(nil)
	}
	return HashOf(b)
}
