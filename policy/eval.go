package policy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/workflow"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// Host is what the policy knows about the machine that would run the
// workflow, as input.host. The caller probes it; this package never does.
// The same facts decide each step's isolation before evaluation
// (engine.Resolve), so the workflow the policy sees carries it resolved.
type Host struct {
	// Isolation lists the isolation levels available here ("namespace",
	// "vm"), sorted.
	Isolation []string `json:"isolation"`
	// Hypervisors lists the hypervisors that can run here ("qemu",
	// "cloud-hypervisor", "firecracker"), sorted.
	Hypervisors []string `json:"hypervisors"`
	KVM         bool     `json:"kvm"` // KVM runs a guest here (the caller probes it)
	Nix         bool     `json:"nix"` // nix is installed
	UID         int      `json:"uid"` // the uid agentsandbox runs as
	// Capacity is what this host can give one sandbox, which the default
	// policy's host_ceilings judge resources against. `serve` fills it in
	// for every admission of an API caller's create or run; apply,
	// validate, plan and rerun leave it out (the operator's own
	// workflows, often written for another machine).
	Capacity *Capacity `json:"capacity,omitempty"`
}

// Capacity is a host's figures for input.host.capacity, probed by the
// caller (engine.ProbeCapacity).
type Capacity struct {
	// CPUs is how many CPUs the server may run on.
	CPUs int `json:"cpus"`
	// MemoryBytes is the host's memory (MemTotal).
	MemoryBytes int64 `json:"memoryBytes"`
	// DiskBytes is the space free, to the server, on the filesystem that
	// holds the workspaces (DiskPath) at the admission: a workspace is a
	// sparse image that grows to its resources.disk as the job writes.
	DiskBytes int64  `json:"diskBytes"`
	DiskPath  string `json:"diskPath"`
}

// normalized returns h with sorted, unique, non-nil lists, so equal facts
// give equal input digests.
func (h Host) normalized() Host {
	norm := func(s []string) []string {
		s = slices.Clone(s)
		slices.Sort(s)
		s = slices.Compact(s)
		if s == nil {
			s = []string{}
		}
		return s
	}
	h.Isolation = norm(h.Isolation)
	h.Hypervisors = norm(h.Hypervisors)
	if h.Capacity != nil {
		c := *h.Capacity
		h.Capacity = &c
	}
	return h
}

// Decision is the outcome of one evaluation. The execution record embeds it.
type Decision struct {
	// ID is sha256("agentsandbox policy decision\n" || bundle || input)
	// over the two raw digests.
	ID Digest `json:"id"`
	// BundleDigest pins the policy files and data (see Load).
	BundleDigest Digest `json:"bundleDigest"`
	// InputDigest is the sha256 of the input document's JSON bytes
	// {"workflow":<canonical workflow>,"host":<Host>}.
	InputDigest Digest `json:"inputDigest"`
	// Policies are the bundle's policy files by digest name, sorted.
	Policies []string `json:"policies"`
	// Deny and Warn are the messages, sorted and unique; never nil.
	Deny []string `json:"deny"`
	Warn []string `json:"warn"`
	// EvalTime is how long the evaluation took (not part of any digest).
	EvalTime time.Duration `json:"evalTimeNs"`
	// Cached is set on a decision read back from a DecisionCache instead
	// of evaluated (EvalTime is then the lookup's); the evaluation it
	// stands for gave the same decision, since evaluation is deterministic.
	Cached bool `json:"cached,omitempty"`
	// SeccompAllow is the policy data agentsandbox.seccomp.allow: step
	// name, or "*" for every step, to the system calls that step's job may
	// make beyond the jail's default seccomp filter. BundleDigest pins it.
	SeccompAllow map[string][]string `json:"seccompAllow,omitempty"`
	// EgressDeny is the policy data agentsandbox.egress_deny: network
	// entries no step may reach, enforced by every step's egress proxy
	// and resolver besides the admission rules. BundleDigest pins it.
	EgressDeny []string `json:"egressDeny,omitempty"`
	// EgressInternal is the policy data agentsandbox.egress_internal:
	// the internal destinations (loopback, link-local, private ranges,
	// the host's own addresses) a step whose network.allow asks for them
	// may reach; no network.allow entry opens one on its own. The egress
	// proxy enforces it at every dial. BundleDigest pins it.
	EgressInternal []string `json:"egressInternal,omitempty"`

	// input is the input document the decision was made on; see Input.
	input []byte
}

// Input is the input document the decision was made on (InputDocument's
// bytes, which InputDigest is over), for a decision log line; nil for a
// decision that did not come from Eval (one decoded from JSON).
func (d *Decision) Input() []byte { return d.input }

// SeccompAllowFor is what SeccompAllow grants step: its own entry and
// "*", sorted, without repeats; nil when nothing is granted.
func (d *Decision) SeccompAllowFor(step string) []string {
	if d == nil {
		return nil
	}
	out := append(slices.Clone(d.SeccompAllow["*"]), d.SeccompAllow[step]...)
	slices.Sort(out)
	return slices.Compact(out)
}

// Allowed reports whether no rule denied.
func (d *Decision) Allowed() bool { return len(d.Deny) == 0 }

// InputDocument returns the exact input the policy sees for w on host: the
// bytes InputDigest is taken over.
func InputDocument(w *workflow.Workflow, host Host) ([]byte, error) {
	wf, err := canonicalWorkflow(w)
	if err != nil {
		return nil, err
	}
	hj, err := json.Marshal(host.normalized())
	if err != nil {
		return nil, fmt.Errorf("encode host facts: %w", err)
	}
	var b bytes.Buffer
	b.Grow(len(wf) + len(hj) + 32)
	b.WriteString(`{"workflow":`)
	b.Write(wf)
	b.WriteString(`,"host":`)
	b.Write(hj)
	b.WriteString("}")
	return b.Bytes(), nil
}

// canonicalWorkflow returns the workflow's canonical JSON, the bytes its
// hash is taken over.
func canonicalWorkflow(w *workflow.Workflow) ([]byte, error) {
	if w == nil {
		return nil, errors.New("policy input: no workflow")
	}
	b, err := w.Canonical()
	if err != nil {
		return nil, fmt.Errorf("policy input: %w", err)
	}
	return b, nil
}

// Eval decides whether w may run on host. A policy that fails at evaluation
// time (a builtin error under strict mode, conflicting rule values) is a
// *SourceError; a denial is a Decision with Deny set, not an error.
func (e *Engine) Eval(ctx context.Context, w *workflow.Workflow, host Host) (*Decision, error) {
	start := time.Now()
	in, err := InputDocument(w, host)
	if err != nil {
		return nil, err
	}
	return e.evalInput(ctx, w, in, start)
}

// evalInput evaluates the input document in (InputDocument's bytes for
// w); the decision's EvalTime counts from start.
func (e *Engine) evalInput(ctx context.Context, w *workflow.Workflow, in []byte, start time.Time) (*Decision, error) {
	value, err := jsonToValue(in)
	if err != nil {
		return nil, fmt.Errorf("policy input: %w", err)
	}
	rs, err := e.query.Eval(ctx, rego.EvalParsedInput(value))
	if err != nil {
		return nil, evalError(err)
	}
	if len(rs) != 1 {
		return nil, fmt.Errorf("evaluate policy: query gave %d results, want 1", len(rs))
	}
	d := &Decision{
		BundleDigest: e.bundle,
		InputDigest:  sha256.Sum256(in),
		input:        in,
		Policies:     slices.Clone(e.policies),
	}
	if len(e.seccompAllow) > 0 {
		d.SeccompAllow = make(map[string][]string, len(e.seccompAllow))
		for k, v := range e.seccompAllow {
			d.SeccompAllow[k] = slices.Clone(v)
		}
	}
	d.EgressDeny = slices.Clone(e.egressDeny)
	d.EgressInternal = slices.Clone(e.egressInternal)
	d.ID = decisionID(d.BundleDigest, d.InputDigest)
	if d.Deny, err = messages(rs[0].Bindings, e.denyVars); err != nil {
		return nil, err
	}
	if internal := e.internalDenials(w); len(internal) > 0 {
		d.Deny = append(d.Deny, internal...)
		slices.Sort(d.Deny)
		d.Deny = slices.Compact(d.Deny)
	}
	if d.Warn, err = messages(rs[0].Bindings, e.warnVars); err != nil {
		return nil, err
	}
	d.EvalTime = time.Since(start)
	return d, nil
}

// internalDenials are the messages for network.allow entries that name
// only internal destinations (egress.InternalEntry: loopback, link-local
// and metadata, private and other special ranges, and IPv6 forms
// carrying them) that data.agentsandbox.egress_internal does not open.
// They are denied whatever the policy's rules say, since the proxy would
// refuse every connection they allow: only the operator's data opens
// internal destinations, never a workflow or an API client. The host's
// own addresses are not known here; the proxy refuses them at dial time.
func (e *Engine) internalDenials(w *workflow.Workflow) []string {
	var out []string
	for _, s := range w.Steps {
		for _, entry := range s.Network.Allow {
			r, err := egress.ParseRule(entry)
			if err != nil {
				continue // "*": the rules deny it, and the runner refuses it
			}
			in, ok := egress.InternalEntry(r, e.internalRules)
			if !ok || e.forbids(r) {
				continue // forbidden outright: the rules say so
			}
			what := fmt.Sprintf("is inside %s, %s", in.Range, in.What)
			if in.Via != "" {
				what = fmt.Sprintf("carries (as %s) addresses inside %s, %s", in.Via, in.Range, in.What)
			}
			out = append(out, fmt.Sprintf("step %q: network.allow %q %s; internal destinations are opened only by the operator's policy data (data.agentsandbox.egress_internal), never by a workflow or an API client: remove the entry, or ask the operator to open it", s.Name, entry, what))
		}
	}
	return out
}

// forbids reports whether an egress_deny prefix overlaps the CIDR rule
// a on a port they share, as the default policy's egress_deny rule
// reads them (which then denies a).
func (e *Engine) forbids(a egress.Rule) bool {
	for _, f := range e.egressDeny {
		r, err := egress.ParseRule(f)
		if err == nil && r.IsCIDR() && r.Prefix.Overlaps(a.Prefix) && (r.Port == 0 || a.Port == 0 || r.Port == a.Port) {
			return true
		}
	}
	return false
}

// evalError makes evaluation errors that point into a policy file a
// *SourceError, so they are reported like compile errors.
func evalError(err error) error {
	var te *topdown.Error
	if errors.As(err, &te) {
		msg := te.Code + ": " + te.Message
		if te.Location != nil && te.Location.File != "" {
			msg = fmt.Sprintf("%s:%d:%d: %s", te.Location.File, te.Location.Row, te.Location.Col, msg)
		}
		return &SourceError{Problems: []string{msg}}
	}
	return fmt.Errorf("evaluate policy: %w", sourceError(err))
}

// messages collects the rule messages bound to vars: strings as they are,
// objects by their "msg" field, anything else as JSON.
func messages(b rego.Vars, vars []string) ([]string, error) {
	out := []string{}
	for _, v := range vars {
		set, ok := b[v].([]any)
		if !ok {
			return nil, fmt.Errorf("evaluate policy: %s is %T, want a set", v, b[v])
		}
		for _, m := range set {
			out = append(out, messageString(m))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func messageString(m any) string {
	switch t := m.(type) {
	case string:
		return t
	case map[string]any:
		if s, ok := t["msg"].(string); ok {
			return s
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Sprint(m)
	}
	return string(b)
}
