package sandboxes

import (
	"context"
	"errors"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/policy"
)

// Every action in a sandbox is judged by the policy's deny_action rules
// (policy/action.go) before it happens, and every decision is written to
// the decision log as one JSON line in OPA's decision log event format
// (policy.ActionEvent: labels with this server's instance id, decision_id,
// bundles, path, input, result, timestamp, metrics, requested_by), so
// existing tooling reads it. The policy can be replaced while the server
// runs (SetPolicy): the next action, and the next create's admission, use
// it.

// PolicySetter is the part of the real manager that swaps the policy.
type PolicySetter interface {
	SetPolicy(p *policy.Engine)
}

// policyHolder holds the current policy and the decision log.
type policyHolder struct {
	mu  sync.Mutex
	pol *policy.Engine
	log io.Writer
	// instance is labels.id of the log's events: one random id per
	// manager, made at its first decision.
	instance string
}

func (m *manager) SetPolicy(p *policy.Engine) {
	m.pol.mu.Lock()
	m.pol.pol = p
	m.pol.mu.Unlock()
	m.drainWarm() // warm sandboxes admitted by the old policy go
}

func (m *manager) policy() *policy.Engine {
	m.pol.mu.Lock()
	defer m.pol.mu.Unlock()
	return m.pol.pol
}

// authorize judges a in sandbox b (nil for a create) and logs the
// decision; a denial is a policy_denied error with the decision's id.
func (m *manager) authorize(ctx context.Context, b *box, a policy.Action) (string, error) {
	pol := m.policy()
	if pol == nil {
		return "", nil
	}
	if b != nil {
		b.mu.Lock()
		a.Sandbox = policy.ActionSandbox{ID: b.id, Labels: b.labels, Isolation: b.info.Isolation}
		b.mu.Unlock()
	}
	if id, ok := IdentityFrom(ctx); ok {
		a.Identity = &policy.ActionIdentity{Name: id.Name, Role: id.Role()}
	}
	start := time.Now()
	d, err := pol.EvalAction(ctx, a)
	if err != nil {
		return "", &Error{Code: CodeInternal, Message: "the action policy failed to evaluate: " + err.Error(), Err: err}
	}
	m.logDecision(a, d, time.Since(start))
	if !d.Allowed() {
		return d.ID.String(), &Error{Code: CodeDenied, Decision: d.ID.String(),
			Message: "the policy denies " + a.Action + ": " + strings.Join(d.Deny, "; ")}
	}
	return d.ID.String(), nil
}

// logDecision writes d as a line of the decision log. requested_by is
// the sandbox the action is in ("sandbox:<id>"), empty for a create.
func (m *manager) logDecision(a policy.Action, d *policy.ActionDecision, took time.Duration) {
	requestedBy := ""
	if a.Sandbox.ID != "" {
		requestedBy = "sandbox:" + a.Sandbox.ID
	}
	m.logEvent(d.Time, requestedBy, func(o policy.EventOptions) (policy.DecisionEvent, error) {
		return policy.ActionEvent(d, a, took, o)
	})
}

// logAdmission writes the admission of the sandbox id, the decision on
// its workflow that engine.OpenSandbox made (also in the sandbox record's
// own decision log) on the input document input, as a line of the
// server's decision log, beside the decisions on its actions.
func (m *manager) logAdmission(d *policy.Decision, input []byte, id string) {
	if d == nil || input == nil {
		return
	}
	m.logEvent(time.Now(), "sandbox:"+id, func(o policy.EventOptions) (policy.DecisionEvent, error) {
		return policy.AdmissionEvent(d, input, o)
	})
}

// logEvent appends the event build makes, with this server's labels, to
// the decision log, if there is one. A failure is logged, not returned:
// the decision stands either way.
func (m *manager) logEvent(at time.Time, requestedBy string, build func(policy.EventOptions) (policy.DecisionEvent, error)) {
	m.pol.mu.Lock()
	defer m.pol.mu.Unlock()
	if m.pol.log == nil {
		return
	}
	err := m.pol.ensureInstance()
	if err == nil {
		var ev policy.DecisionEvent
		ev, err = build(policy.EventOptions{ID: m.pol.instance, Version: m.o.Engine.ToolVersion, Time: at, RequestedBy: requestedBy})
		if err == nil {
			var line []byte
			if line, err = policy.AppendEvent(nil, ev); err == nil {
				_, err = m.pol.log.Write(line)
			}
		}
	}
	if err != nil {
		m.o.Logf("decision log: %v", err)
	}
}

// logOpened logs the admission of a sandbox engine.OpenSandbox opened, or
// the denial it refused one with (err); other errors made no decision.
func (m *manager) logOpened(sb *engine.Sandbox, id string, err error) {
	var denied *policy.DeniedError
	switch {
	case err == nil:
		m.logAdmission(sb.Decision, sb.Decision.Input(), id)
	case errors.As(err, &denied):
		m.logAdmission(denied.Decision, denied.Decision.Input(), id)
	}
}

// ensureInstance makes labels.id of the log's events on first use; h.mu
// is held.
func (h *policyHolder) ensureInstance() error {
	if h.instance != "" {
		return nil
	}
	id, err := newID()
	if err != nil {
		return err
	}
	h.instance = id
	return nil
}

func envNames(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k := range env {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
