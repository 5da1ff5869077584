package sandboxes

import (
	"context"
	"encoding/json"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/policy"
)

// Every action in a sandbox is judged by the policy's deny_action rules
// (policy/action.go) before it happens, and every decision is written to
// the decision log as one JSON line in the shape of OPA's decision logs
// (decision_id, path, input, result, timestamp, bundle), so existing
// tooling reads it. The policy can be replaced while the server runs
// (SetPolicy): the next action, and the next create's admission, use it.

// PolicySetter is the part of the real manager that swaps the policy.
type PolicySetter interface {
	SetPolicy(p *policy.Engine)
}

// policyHolder holds the current policy and the decision log.
type policyHolder struct {
	mu  sync.Mutex
	pol *policy.Engine
	log io.Writer
}

func (m *manager) SetPolicy(p *policy.Engine) {
	m.pol.mu.Lock()
	defer m.pol.mu.Unlock()
	m.pol.pol = p
}

func (m *manager) policy() *policy.Engine {
	m.pol.mu.Lock()
	defer m.pol.mu.Unlock()
	return m.pol.pol
}

// decisionLine is one line of the decision log.
type decisionLine struct {
	DecisionID  string         `json:"decision_id"`
	Path        string         `json:"path"`
	Input       policy.Action  `json:"input"`
	InputDigest string         `json:"input_digest"`
	Result      map[string]any `json:"result"`
	Timestamp   time.Time      `json:"timestamp"`
	Bundle      string         `json:"bundle"`
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
	d, err := pol.EvalAction(ctx, a)
	if err != nil {
		return "", &Error{Code: CodeInternal, Message: "the action policy failed to evaluate: " + err.Error(), Err: err}
	}
	m.logDecision(a, d)
	if !d.Allowed() {
		return d.ID.String(), &Error{Code: CodeDenied, Decision: d.ID.String(),
			Message: "the policy denies " + a.Action + ": " + strings.Join(d.Deny, "; ")}
	}
	return d.ID.String(), nil
}

func (m *manager) logDecision(a policy.Action, d *policy.ActionDecision) {
	m.pol.mu.Lock()
	defer m.pol.mu.Unlock()
	if m.pol.log == nil {
		return
	}
	line, err := json.Marshal(decisionLine{
		DecisionID: d.ID.String(), Path: "agentsandbox/" + policy.ActionRule, Input: a,
		InputDigest: d.InputDigest.String(), Result: map[string]any{"deny": d.Deny, "allowed": d.Allowed()},
		Timestamp: d.Time, Bundle: d.BundleDigest.String(),
	})
	if err != nil {
		return
	}
	_, _ = m.pol.log.Write(append(line, '\n'))
}

func envNames(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k := range env {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
