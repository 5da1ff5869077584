package policy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Decision logs: every decision agentsandbox makes is written as one JSON
// line in the event format of OPA's decision logs (the EventV1 of OPA's
// plugins/logs package, the body of its decision log service API and of
// its console logger), so tooling that reads OPA's logs reads ours. An
// apply stores its run's log as a blob the record names
// (record.Policy.DecisionLog); the server appends one line per action to
// STATE-DIR/serve-decisions.log. docs/policy.md documents the fields.
//
// The type is our own, with OPA's field names: importing OPA's would pull
// its server, plugin manager, OCI downloader and Prometheus client into
// the binary for one struct.

// LogType is labels.type of every event agentsandbox writes.
const LogType = "agentsandbox"

// Paths of the decisions, as OPA spells the document a query asked for
// (slash-separated, without "data."). Admission asks for package
// agentsandbox's deny and warn rules (and those of the packages below
// it); an action asks for its deny_action rules.
const (
	AdmissionPath = Package
	ActionPath    = Package + "/" + ActionRule
)

// MaxLoggedInput is the largest input document an event carries by
// default. A larger one is left out (see DecisionEvent.Erased); its digest
// is always in custom.input_digest.
const MaxLoggedInput = 64 << 10

// erasedInput is how OPA's own masking says the whole input was removed.
const erasedInput = "/input"

// maxEventLine bounds one line when decoding a log.
const maxEventLine = 4 << 20

// DecisionEvent is one decision log event, with OPA's field names and
// JSON shapes. The fields OPA's events have that agentsandbox never sets
// (batch and trace ids, intermediate results, request context, ...) are
// left out; a decoder for OPA's type reads these lines unchanged.
type DecisionEvent struct {
	// Labels identify who decided: id (the run id for an apply, the
	// server's instance id for serve), version (the agentsandbox version)
	// and type ("agentsandbox").
	Labels     map[string]string `json:"labels"`
	DecisionID string            `json:"decision_id"`
	// Bundles has one entry, "agentsandbox", whose revision is the policy
	// bundle digest (Decision.BundleDigest).
	Bundles map[string]BundleInfo `json:"bundles,omitempty"`
	// Path is the document the query asked for: AdmissionPath or ActionPath.
	Path string `json:"path,omitempty"`
	// Input is the input document, absent when Erased lists "/input".
	Input json.RawMessage `json:"input,omitempty"`
	// Result is {"allowed", "deny", "warn"} for an admission and
	// {"allowed", "deny"} for an action.
	Result json.RawMessage `json:"result,omitempty"`
	// Erased lists what was left out, as OPA's masking does: "/input"
	// when the input document was over the size limit.
	Erased      []string  `json:"erased,omitempty"`
	RequestedBy string    `json:"requested_by,omitempty"`
	Timestamp   time.Time `json:"timestamp"`
	// Metrics holds timer_rego_query_eval_ns, the evaluation's duration,
	// or timer_decision_cache_ns for a decision read from a DecisionCache.
	Metrics map[string]any `json:"metrics,omitempty"`
	// Custom holds input_digest, the sha256 of the input document's exact
	// bytes, whether the input is logged or not (Decision.InputDigest),
	// and cached: true for a decision read from a DecisionCache.
	Custom map[string]any `json:"custom,omitempty"`
}

// BundleInfo is a bundle's entry in DecisionEvent.Bundles.
type BundleInfo struct {
	Revision string `json:"revision,omitempty"`
}

// BundleName is the name the policy bundle has in DecisionEvent.Bundles.
const BundleName = "agentsandbox"

// EventOptions are what an event says besides the decision.
type EventOptions struct {
	// ID and Version become labels.id and labels.version.
	ID      string
	Version string
	// RequestedBy becomes requested_by (empty: left out).
	RequestedBy string
	// Time is when the decision was made; it is written in UTC.
	Time time.Time
	// MaxInput is the largest input logged (0: MaxLoggedInput; negative:
	// never log the input).
	MaxInput int
}

// AdmissionEvent is the event of an admission decision whose input
// document (InputDocument) was input.
func AdmissionEvent(d *Decision, input []byte, o EventOptions) (DecisionEvent, error) {
	if d == nil {
		return DecisionEvent{}, errors.New("admission decision log event: no decision")
	}
	result := struct {
		Allowed bool     `json:"allowed"`
		Deny    []string `json:"deny"`
		Warn    []string `json:"warn"`
	}{d.Allowed(), orEmpty(d.Deny), orEmpty(d.Warn)}
	ev, err := newEvent("admission", d.ID, d.BundleDigest, d.InputDigest, AdmissionPath, input, result, d.EvalTime, o)
	if err == nil && d.Cached {
		// No query ran: the decision came from a DecisionCache.
		ev.Metrics = map[string]any{"timer_decision_cache_ns": d.EvalTime.Nanoseconds()}
		ev.Custom["cached"] = true
	}
	return ev, err
}

// ActionEvent is the event of an action decision whose input was a;
// evalTime is how long EvalAction took.
func ActionEvent(d *ActionDecision, a Action, evalTime time.Duration, o EventOptions) (DecisionEvent, error) {
	if d == nil {
		return DecisionEvent{}, errors.New("action decision log event: no decision")
	}
	input, err := json.Marshal(a)
	if err != nil {
		return DecisionEvent{}, fmt.Errorf("action decision log event: %w", err)
	}
	result := struct {
		Allowed bool     `json:"allowed"`
		Deny    []string `json:"deny"`
	}{d.Allowed(), orEmpty(d.Deny)}
	return newEvent("action", d.ID, d.BundleDigest, d.InputDigest, ActionPath, input, result, evalTime, o)
}

func newEvent(kind string, id, bundle, inputDigest Digest, path string, input []byte, result any, evalTime time.Duration, o EventOptions) (DecisionEvent, error) {
	if Digest(sha256.Sum256(input)) != inputDigest {
		return DecisionEvent{}, fmt.Errorf("%s decision log event: the input document does not hash to the decision's input digest %s", kind, inputDigest)
	}
	res, err := json.Marshal(result)
	if err != nil {
		return DecisionEvent{}, fmt.Errorf("%s decision log event: %w", kind, err)
	}
	ev := DecisionEvent{
		Labels:      map[string]string{"id": o.ID, "version": o.Version, "type": LogType},
		DecisionID:  id.String(),
		Bundles:     map[string]BundleInfo{BundleName: {Revision: bundle.String()}},
		Path:        path,
		Result:      res,
		RequestedBy: o.RequestedBy,
		Timestamp:   o.Time.UTC(),
		Metrics:     map[string]any{"timer_rego_query_eval_ns": evalTime.Nanoseconds()},
		Custom:      map[string]any{"input_digest": inputDigest.String()},
	}
	limit := o.MaxInput
	if limit == 0 {
		limit = MaxLoggedInput
	}
	if limit > 0 && len(input) <= limit {
		var buf bytes.Buffer
		if err := json.Compact(&buf, input); err != nil {
			return DecisionEvent{}, fmt.Errorf("%s decision log event: input is not JSON: %w", kind, err)
		}
		ev.Input = buf.Bytes()
	} else {
		ev.Erased = []string{erasedInput}
	}
	return ev, nil
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// AppendEvent appends ev to b as one JSON line.
func AppendEvent(b []byte, ev DecisionEvent) ([]byte, error) {
	line, err := json.Marshal(ev)
	if err != nil {
		return b, fmt.Errorf("encode decision log event %s: %w", ev.DecisionID, err)
	}
	b = append(b, line...)
	return append(b, '\n'), nil
}

// EncodeDecisionLog writes events as JSON lines.
func EncodeDecisionLog(w io.Writer, events []DecisionEvent) error {
	var b []byte
	for _, ev := range events {
		var err error
		if b, err = AppendEvent(b, ev); err != nil {
			return err
		}
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write decision log: %w", err)
	}
	return nil
}

// DecodeDecisionLog reads a log of JSON lines strictly: every line one
// event with no unknown field, no trailing data, each with a decision_id
// and a timestamp. Lines are bounded (4 MiB).
func DecodeDecisionLog(r io.Reader) ([]DecisionEvent, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventLine)
	var out []DecisionEvent
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			return nil, fmt.Errorf("decode decision log: line %d is empty", n)
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		var ev DecisionEvent
		if err := dec.Decode(&ev); err != nil {
			return nil, fmt.Errorf("decode decision log: line %d: %w", n, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("decode decision log: line %d: data after the event", n)
		}
		if _, err := ParseDigest(ev.DecisionID); err != nil {
			return nil, fmt.Errorf("decode decision log: line %d: decision_id: %w", n, err)
		}
		if ev.Timestamp.IsZero() {
			return nil, fmt.Errorf("decode decision log: line %d: no timestamp", n)
		}
		out = append(out, ev)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("decode decision log: a line is over %d bytes: %w", maxEventLine, err)
		}
		return nil, fmt.Errorf("decode decision log: %w", err)
	}
	return out, nil
}

// BundleRevision is the policy bundle digest the event names, or "".
func (ev DecisionEvent) BundleRevision() string { return ev.Bundles[BundleName].Revision }
