package policy

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// Actions are what an agent does in a long-lived sandbox (agentsandbox
// serve): create one, run a command, read or write a file. A policy
// judges them with `deny_action` rules in package agentsandbox (or below
// it), whose input is an Action:
//
//	package agentsandbox
//
//	deny_action contains msg if {
//		input.action == "file_read"
//		not startswith(input.path, "data/")
//		msg := sprintf("%s: agents may only read under data/", [input.path])
//	}
//
// A bundle without deny_action rules allows every action; the default
// policy has none. The decision is traceable like an admission's: its id
// is over the bundle's digest and the input's.

// ActionRule is the name of the rules that judge actions.
const ActionRule = "deny_action"

// Action kinds.
const (
	ActionCreate    = "create"
	ActionExec      = "exec"
	ActionFileRead  = "file_read"
	ActionFileWrite = "file_write"
	ActionFileList  = "file_list"
	ActionRemove    = "file_remove"
	ActionMkdir     = "file_mkdir"
	ActionMove      = "file_move" // path is the source, destination the target
	ActionWatch     = "file_watch"
	ActionSnapshot  = "snapshot"
	ActionRestore   = "restore"
	// ActionRunWorkflow is a whole workflow run by the server (the MCP
	// tool run_workflow, POST /v1/runs); its steps are then admitted like
	// an apply's.
	ActionRunWorkflow = "run_workflow"
	// ActionNetworkGrant and ActionNetworkRevoke change a running
	// sandbox's network.allow; network lists the entries.
	ActionNetworkGrant  = "network_grant"
	ActionNetworkRevoke = "network_revoke"
)

// Action is the input document of an action's decision.
type Action struct {
	Action  string        `json:"action"`
	Sandbox ActionSandbox `json:"sandbox"`
	// Identity is the server's caller that asks for the action (absent
	// for the operator's own process).
	Identity *ActionIdentity `json:"identity,omitempty"`
	// exec: the command, its working directory and its environment's
	// names (never their values).
	Command  []string `json:"command,omitempty"`
	Cwd      string   `json:"cwd,omitempty"`
	EnvNames []string `json:"env_names,omitempty"`
	// file actions: the workspace-relative path.
	Path string `json:"path,omitempty"`
	// file_move: the workspace-relative path moved to.
	Destination string `json:"destination,omitempty"`
	// create: the canonical step the sandbox would run.
	Step any `json:"step,omitempty"`
	// run_workflow: the workflow.
	Workflow *ActionWorkflow `json:"workflow,omitempty"`
	// network_grant, network_revoke: the network.allow entries.
	Network []string `json:"network,omitempty"`
}

// ActionIdentity is the caller of an action: its name in the server's
// identities ("uid-N" on the unix socket) and its role, "user" or
// "admin".
type ActionIdentity struct {
	Name string `json:"name"`
	Role string `json:"role"`
}

// ActionWorkflow names the workflow of a run_workflow action.
type ActionWorkflow struct {
	Name  string   `json:"name"`
	Hash  string   `json:"hash"` // its canonical hash, sha256:<hex>
	Steps []string `json:"steps"`
}

// ActionSandbox names the sandbox an action is taken in.
type ActionSandbox struct {
	ID        string            `json:"id,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Isolation string            `json:"isolation,omitempty"`
}

// ActionDecision is the verdict on one action.
type ActionDecision struct {
	ID           Digest    `json:"id"`
	BundleDigest Digest    `json:"bundleDigest"`
	InputDigest  Digest    `json:"inputDigest"`
	Action       string    `json:"action"`
	Deny         []string  `json:"deny"`
	Time         time.Time `json:"time"`
}

// Allowed reports whether no rule denied the action.
func (d *ActionDecision) Allowed() bool { return len(d.Deny) == 0 }

// actionRefs are the deny_action rules of package agentsandbox and below.
func actionRefs(modules map[string]*ast.Module) []string {
	root := ast.MustParseRef("data." + Package)
	var out []string
	for _, m := range modules {
		if !m.Package.Path.HasPrefix(root) {
			continue
		}
		for _, r := range m.Rules {
			ref := r.Ref().GroundPrefix()
			if len(ref) != len(m.Package.Path)+1 {
				continue
			}
			if name, ok := ref[len(ref)-1].Value.(ast.String); ok && name == ActionRule {
				out = append(out, ref.String())
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// prepareActions prepares the query of the bundle's deny_action rules;
// nil when it has none.
func prepareActions(ctx context.Context, compiler *ast.Compiler, b *bundle, modules map[string]*ast.Module, caps *ast.Capabilities) (*rego.PreparedEvalQuery, []string, error) {
	refs := actionRefs(modules)
	if len(refs) == 0 {
		return nil, nil, nil
	}
	var q string
	var vars []string
	for i, r := range refs {
		v := fmt.Sprintf("deny_action%d", i)
		vars = append(vars, v)
		if i > 0 {
			q += "; "
		}
		q += fmt.Sprintf("%s := {m | some m in %s}", v, r)
	}
	pq, err := rego.New(
		rego.Query(q),
		rego.Compiler(compiler),
		rego.Store(inmem.NewFromObject(b.data)),
		rego.Capabilities(caps),
		rego.StrictBuiltinErrors(true),
	).PrepareForEval(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("prepare the action query: %w", sourceError(err))
	}
	return &pq, vars, nil
}

// EvalAction judges one action. A denial is a decision with Deny set, not
// an error; a policy that fails to evaluate is a *SourceError.
func (e *Engine) EvalAction(ctx context.Context, a Action) (*ActionDecision, error) {
	in, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("action input: %w", err)
	}
	d := &ActionDecision{BundleDigest: e.bundle, InputDigest: sha256.Sum256(in), Action: a.Action, Deny: []string{}, Time: time.Now().UTC()}
	d.ID = decisionID(d.BundleDigest, d.InputDigest)
	if e.actionQuery == nil {
		return d, nil
	}
	value, err := jsonToValue(in)
	if err != nil {
		return nil, fmt.Errorf("action input: %w", err)
	}
	rs, err := e.actionQuery.Eval(ctx, rego.EvalParsedInput(value))
	if err != nil {
		return nil, sourceError(err)
	}
	if len(rs) != 1 {
		return nil, fmt.Errorf("evaluate the action policy: query gave %d results, want 1", len(rs))
	}
	if d.Deny, err = messages(rs[0].Bindings, e.actionVars); err != nil {
		return nil, err
	}
	return d, nil
}

// HasActionRules reports whether the bundle judges actions at all.
func (e *Engine) HasActionRules() bool { return e.actionQuery != nil }
