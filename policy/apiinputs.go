package policy

import (
	"fmt"
	"slices"

	"github.com/agentsandbox/agentsandbox/egress"
)

// APIInputs is what the inputs of a workflow an API caller sent (an inline
// workflow of POST /v1/runs or the MCP tool run_workflow) may be: the
// policy data agentsandbox.api_inputs, with egress_deny beside it. A
// workflow the operator wrote (apply, rerun, a file in serve's template
// directory) is not judged by it.
//
// Without the data (--no-default-policy, or keys left out) every field
// takes its safe default: git only over http(s), no stored blob by its
// digest, public addresses only.
type APIInputs struct {
	// GitSchemes are the URL schemes a git source may use
	// (api_inputs.git_schemes; default http and https). http and https
	// are fetched through the server's address checks; ssh, git and file
	// are fetched as the operator's own (the server's keys, git
	// configuration and files, with no address check), so naming them
	// trusts every API caller with those.
	GitSchemes []string
	// FromStore lets an input be served from the server's store by its
	// pin (sha256, or a git commit fetched before) without its source
	// being read (api_inputs.from_store; default false). With it, anyone
	// who knows a digest (records hold them) gets that content.
	FromStore bool
	// NetworkAllow are addresses and prefixes, with an optional port, in
	// network.allow's form, that an API caller's http(s) and git fetches
	// may reach although they are loopback, private, link-local or
	// otherwise special (api_inputs.network_allow; default none).
	NetworkAllow []string
	// EgressDeny is data.agentsandbox.egress_deny: API fetches never reach
	// those either.
	EgressDeny []string
}

// GitSchemes are the schemes api_inputs.git_schemes may name; "ssh"
// covers scp-like sources (git::git@host:path) too.
var GitSchemes = []string{"file", "git", "http", "https", "ssh"}

// DefaultAPIInputs is APIInputs when the data says nothing.
func DefaultAPIInputs() APIInputs {
	return APIInputs{GitSchemes: []string{"http", "https"}}
}

// APIInputs returns the bundle's api_inputs settings.
func (e *Engine) APIInputs() APIInputs {
	a := e.apiInputs
	a.GitSchemes = slices.Clone(a.GitSchemes)
	a.NetworkAllow = slices.Clone(a.NetworkAllow)
	a.EgressDeny = slices.Clone(e.egressDeny)
	return a
}

// apiInputsData reads data.agentsandbox.api_inputs strictly: an unknown
// key, a wrong type or an entry that cannot be enforced is a SourceError.
func apiInputsData(data map[string]any) (APIInputs, error) {
	const key = "data.agentsandbox.api_inputs"
	out := DefaultAPIInputs()
	as, _ := data["agentsandbox"].(map[string]any)
	v, ok := as["api_inputs"]
	if !ok || v == nil {
		return out, nil
	}
	bad := func(format string, a ...any) (APIInputs, error) {
		return APIInputs{}, &SourceError{Problems: []string{fmt.Sprintf("policy data "+key+format, a...)}}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return bad(` is %T, want an object such as {"git_schemes": ["https"], "from_store": false, "network_allow": ["10.1.2.3/32:443"]}`, v)
	}
	for k, v := range m {
		switch k {
		case "git_schemes":
			list, ok := v.([]any)
			if !ok {
				return bad(".git_schemes is %T, want a list of schemes from %q", v, GitSchemes)
			}
			out.GitSchemes = []string{}
			for _, x := range list {
				s, ok := x.(string)
				if !ok || !slices.Contains(GitSchemes, s) {
					return bad(".git_schemes holds %v, want schemes from %q", x, GitSchemes)
				}
				out.GitSchemes = append(out.GitSchemes, s)
			}
			slices.Sort(out.GitSchemes)
			out.GitSchemes = slices.Compact(out.GitSchemes)
		case "from_store":
			b, ok := v.(bool)
			if !ok {
				return bad(".from_store is %T, want true or false", v)
			}
			out.FromStore = b
		case "network_allow":
			list, ok := v.([]any)
			if !ok {
				return bad(`.network_allow is %T, want a list of addresses or prefixes such as ["10.1.2.3/32:443"]`, v)
			}
			for _, x := range list {
				s, ok := x.(string)
				if !ok {
					return bad(".network_allow holds %v, want addresses or prefixes (strings)", x)
				}
				r, err := egress.ParseRule(s)
				if err != nil {
					return bad(".network_allow: %v", err)
				}
				if !r.IsCIDR() {
					// A name would let whoever answers for it in DNS
					// choose the addresses it opens.
					return bad(".network_allow holds %q, a name; name the address or prefix it stands for (such as \"10.1.2.3/32:443\")", s)
				}
				out.NetworkAllow = append(out.NetworkAllow, s)
			}
			slices.Sort(out.NetworkAllow)
			out.NetworkAllow = slices.Compact(out.NetworkAllow)
		default:
			return bad(" has the unknown key %q; the keys are git_schemes, from_store and network_allow", k)
		}
	}
	return out, nil
}
