package sandboxes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
)

// A running sandbox's egress can be granted and revoked: its
// network.allow changes, and the next connection and DNS query are judged
// by the new list (connections already open go on). Each change is an
// action the policy judges (network_grant, network_revoke), then the new
// list is admitted exactly as a create's would be (engine's ChangeEgress:
// open egress, ports, bandwidth, egress_deny, internal destinations),
// and it is a line of the sandbox's network log and an entry of its
// record. Only a sandbox
// created with network.allow has the network room (firewall, resolver,
// proxy) whose rules can change; one created without has no network at
// all, and keeps it that way.

// NetworkInfo is a sandbox's egress rules in force.
type NetworkInfo struct {
	// Allow is the sandbox's network.allow now.
	Allow []string `json:"allow"`
	// Deny is the policy's egress_deny in force for it, which no allow
	// entry opens.
	Deny []string `json:"deny"`
}

// NetworkUpdate grants and revokes network.allow entries. Revokes apply
// first; an entry granted that is already allowed is kept once.
type NetworkUpdate struct {
	Grant  []string `json:"grant,omitempty"`
	Revoke []string `json:"revoke,omitempty"`
}

// NetworkManager is the part of the real manager that changes a running
// sandbox's egress.
type NetworkManager interface {
	Network(ctx context.Context, id string) (NetworkInfo, error)
	UpdateNetwork(ctx context.Context, id string, u NetworkUpdate) (NetworkInfo, error)
}

// maxNetworkEntries bounds a sandbox's network.allow.
const maxNetworkEntries = 256

func (m *manager) Network(ctx context.Context, id string) (NetworkInfo, error) {
	b, err := m.live(ctx, id)
	if err != nil {
		return NetworkInfo{}, err
	}
	gw := b.sb.Gateway()
	if gw == nil {
		return NetworkInfo{Allow: []string{}, Deny: []string{}}, nil
	}
	allow, deny := gw.Rules().Entries()
	return NetworkInfo{Allow: allow, Deny: deny}, nil
}

func (m *manager) UpdateNetwork(ctx context.Context, id string, u NetworkUpdate) (NetworkInfo, error) {
	if len(u.Grant) == 0 && len(u.Revoke) == 0 {
		return NetworkInfo{}, Errorf(CodeBadRequest, "network: give grant, revoke or both, such as {\"grant\": [\"pypi.org:443\"]}")
	}
	// Each entry is read as network.allow reads it, so a grant is
	// refused with the same message a workflow would get.
	grant, err := canonicalEntries("grant", u.Grant)
	if err != nil {
		return NetworkInfo{}, err
	}
	revoke, err := canonicalEntries("revoke", u.Revoke)
	if err != nil {
		return NetworkInfo{}, err
	}
	b, err := m.live(ctx, id)
	if err != nil {
		return NetworkInfo{}, err
	}
	gw := b.sb.Gateway()
	if gw == nil {
		return NetworkInfo{}, &Error{Code: CodeConflict, Message: "sandbox " + id + ": " + engine.ErrNoEgress.Error(), Err: engine.ErrNoEgress}
	}
	var decisions []string
	for _, c := range []struct {
		action  string
		entries []string
	}{{policy.ActionNetworkRevoke, revoke}, {policy.ActionNetworkGrant, grant}} {
		if len(c.entries) == 0 {
			continue
		}
		d, err := m.authorize(ctx, b, policy.Action{Action: c.action, Network: c.entries})
		if err != nil {
			return NetworkInfo{}, err
		}
		if d != "" {
			decisions = append(decisions, d)
		}
	}
	// One change at a time per sandbox: read, change and set under the
	// sandbox's network lock, so two updates never lose one another.
	b.netMu.Lock()
	defer b.netMu.Unlock()
	allow, _ := gw.Rules().Entries()
	for _, r := range revoke {
		i := slices.Index(allow, r)
		if i < 0 {
			return NetworkInfo{}, Errorf(CodeBadRequest, "revoke %q: the sandbox's network.allow has no such entry (it has: %s)", r, listOrNone(allow))
		}
		allow = slices.Delete(allow, i, i+1)
	}
	for _, g := range grant {
		if !slices.Contains(allow, g) {
			allow = append(allow, g)
		}
	}
	if len(allow) > maxNetworkEntries {
		return NetworkInfo{}, Errorf(CodeBadRequest, "network.allow would have %d entries; a sandbox takes at most %d (use *.domain or CIDR entries)", len(allow), maxNetworkEntries)
	}
	// The new network.allow is admitted as the sandbox was, by the
	// policy in force: a grant the admission would deny at create is
	// denied here, with the same messages.
	d, err := b.sb.ChangeEgress(ctx, m.admissionPolicy(), allow)
	if d != nil {
		m.logAdmission(d, d.Input(), id)
		decisions = append(decisions, d.ID.String())
	}
	if err != nil {
		var denied *engine.EgressDeniedError
		switch {
		case errors.As(err, &denied):
			return NetworkInfo{}, &Error{Code: CodeDenied, Message: err.Error(), Decision: denied.Decision.ID.String(), Err: err}
		case errors.Is(err, engine.ErrNoEgress):
			return NetworkInfo{}, &Error{Code: CodeConflict, Message: err.Error(), Err: err}
		case d == nil:
			return NetworkInfo{}, &Error{Code: CodeInternal, Message: "the admission policy failed to evaluate: " + err.Error(), Err: err}
		}
		return NetworkInfo{}, Errorf(CodeBadRequest, "%v", err)
	}
	b.touch()
	summary := fmt.Sprintf("network.allow now [%s]", strings.Join(allow, ", "))
	if len(grant) > 0 {
		summary += "; granted " + strings.Join(grant, ", ")
	}
	if len(revoke) > 0 {
		summary += "; revoked " + strings.Join(revoke, ", ")
	}
	b.addEntry(record.Action{Kind: "network", Time: time.Now().UTC(), Network: slices.Clone(allow),
		Decision: strings.Join(decisions, ",")}, summary)
	allowNow, deny := gw.Rules().Entries()
	return NetworkInfo{Allow: allowNow, Deny: deny}, nil
}

// canonicalEntries parses each entry as a network.allow entry.
func canonicalEntries(what string, entries []string) ([]string, error) {
	if len(entries) > maxNetworkEntries {
		return nil, Errorf(CodeBadRequest, "%s: %d entries; at most %d at once", what, len(entries), maxNetworkEntries)
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		r, err := egress.ParseRule(e)
		if err != nil {
			return nil, Errorf(CodeBadRequest, "%s %q: %v", what, e, err)
		}
		out = append(out, r.Entry)
	}
	return out, nil
}

// admissionPolicy is the policy that admits creates now: the one set
// with SetPolicy, else the one the manager started with.
func (m *manager) admissionPolicy() engine.Policy {
	if p := m.policy(); p != nil {
		return p
	}
	return m.o.Engine.Policy
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
