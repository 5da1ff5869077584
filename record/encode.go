package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Encode returns the canonical JSON encoding of r, the bytes its ID is the
// sha256 of. The rules (docs/records.md):
//   - object keys sorted by their UTF-8 bytes, no whitespace between tokens,
//     no trailing newline;
//   - numbers are integers only (sizes in bytes, durations in ns), in
//     decimal without exponent or leading zeros;
//   - times are RFC 3339 in UTC with nanoseconds and trailing zeros of the
//     fraction dropped (Go's time.RFC3339Nano);
//   - strings are escaped as Go's encoding/json does with HTML escaping off;
//   - set-like lists are sorted (inputs and steps by name, closures and
//     outputs by path, policy messages), empty lists are [] and never null.
//
// Encode does not change r.
func Encode(r *Record) ([]byte, error) {
	n := normalize(r)
	first, err := marshal(n)
	if err != nil {
		return nil, fmt.Errorf("encode record: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(first))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, fmt.Errorf("encode record: re-read: %w", err)
	}
	if err := integersOnly(tree, "$"); err != nil {
		return nil, fmt.Errorf("encode record: %w", err)
	}
	// encoding/json writes map keys sorted, which makes the second pass
	// canonical.
	out, err := marshal(tree)
	if err != nil {
		return nil, fmt.Errorf("encode record: %w", err)
	}
	return out, nil
}

// Decode parses canonical record bytes. It accepts only what Encode would
// write for the same record: an unknown field, a duplicate key, extra
// whitespace or any other spelling is an error, so one record has one id.
// A record of another schema version is refused with an error naming both
// versions.
func Decode(b []byte) (*Record, error) {
	var head struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("decode record: %w", err)
	}
	if head.Version == nil {
		return nil, errors.New("decode record: no version field; this is not an agentsandbox record")
	}
	if *head.Version != Version {
		return nil, fmt.Errorf("decode record: schema version %d, this agentsandbox reads version %d; use the agentsandbox that wrote it", *head.Version, Version)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var r Record
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("decode record: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("decode record: data after the record")
	}
	again, err := Encode(&r)
	if err != nil {
		return nil, fmt.Errorf("decode record: %w", err)
	}
	if !bytes.Equal(again, b) {
		return nil, fmt.Errorf("decode record: not in canonical form (first difference at byte %d)", firstDiff(again, b))
	}
	return &r, nil
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// integersOnly rejects any number that is not an integer literal.
func integersOnly(v any, at string) error {
	switch v := v.(type) {
	case json.Number:
		if strings.ContainsAny(string(v), ".eE") {
			return fmt.Errorf("%s: number %s is not an integer; records hold integers only", at, v)
		}
	case map[string]any:
		for k, e := range v {
			if err := integersOnly(e, at+"."+k); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range v {
			if err := integersOnly(e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// normalize returns a copy of r in canonical shape: UTC times without
// monotonic readings, sorted sets, empty instead of nil lists and maps.
func normalize(r *Record) *Record {
	n := *r
	n.Started, n.Finished = canonTime(r.Started), canonTime(r.Finished)
	if r.Policy != nil {
		p := *r.Policy
		p.Deny = sortedStrings(p.Deny)
		p.Warn = sortedStrings(p.Warn)
		n.Policy = &p
	}
	if r.Parent != nil {
		p := *r.Parent
		n.Parent = &p
	}
	n.Inputs = slices.Clone(r.Inputs)
	if n.Inputs == nil {
		n.Inputs = []Input{}
	}
	slices.SortStableFunc(n.Inputs, func(a, b Input) int { return strings.Compare(a.Name, b.Name) })
	n.Steps = make([]Step, len(r.Steps))
	for i, s := range r.Steps {
		s.Started, s.Finished = canonTime(s.Started), canonTime(s.Finished)
		s.Closure = slices.Clone(s.Closure)
		if s.Closure == nil {
			s.Closure = []StorePath{}
		}
		slices.SortStableFunc(s.Closure, func(a, b StorePath) int { return strings.Compare(a.Path, b.Path) })
		s.Outputs = slices.Clone(s.Outputs)
		if s.Outputs == nil {
			s.Outputs = []Output{}
		}
		slices.SortStableFunc(s.Outputs, func(a, b Output) int { return strings.Compare(a.Path, b.Path) })
		s.Inputs = maps.Clone(s.Inputs)
		if s.Inputs == nil {
			s.Inputs = map[string]Digest{}
		}
		if s.HostRoot != nil {
			h := *s.HostRoot
			s.HostRoot = &h
		}
		if s.Logs.Console != nil {
			c := *s.Logs.Console
			s.Logs.Console = &c
		}
		if s.Network != nil {
			nw := *s.Network
			nw.Allow = sortedStrings(nw.Allow)
			if nw.Deny != nil {
				nw.Deny = sortedStrings(nw.Deny)
			}
			s.Network = &nw
		}
		n.Steps[i] = s
	}
	slices.SortStableFunc(n.Steps, func(a, b Step) int { return strings.Compare(a.Name, b.Name) })
	if r.Sandbox != nil {
		sb := *r.Sandbox
		sb.Labels = maps.Clone(sb.Labels)
		sb.Entries = slices.Clone(sb.Entries)
		if sb.Entries == nil {
			sb.Entries = []Entry{}
		}
		for i := range sb.Entries {
			sb.Entries[i].Time = canonTime(sb.Entries[i].Time)
		}
		slices.SortStableFunc(sb.Entries, func(a, b Entry) int { return a.Seq - b.Seq })
		n.Sandbox = &sb
	}
	return &n
}

func canonTime(t time.Time) time.Time { return t.UTC().Round(0) }

func sortedStrings(s []string) []string {
	s = slices.Clone(s)
	if s == nil {
		return []string{}
	}
	slices.Sort(s)
	return s
}
