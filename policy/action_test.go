package policy

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

func TestEvalAction(t *testing.T) {
	ctx := context.Background()
	// The default policy judges no actions: every one is allowed.
	e := load(t, Options{})
	if e.HasActionRules() {
		t.Fatal("the default policy has action rules")
	}
	d, err := e.EvalAction(ctx, Action{Action: ActionExec, Command: []string{"rm", "-rf", "/"}})
	if err != nil || !d.Allowed() || d.ID.IsZero() {
		t.Fatalf("default: %+v %v", d, err)
	}

	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "actions.rego"), `package agentsandbox

deny_action contains msg if {
	input.action == "file_read"
	not startswith(input.path, "data/")
	msg := sprintf("%s: agents may read only under data/", [input.path])
}

deny_action contains msg if {
	input.action == "exec"
	input.command[0] == "curl"
	not input.sandbox.labels.trust == "high"
	msg := "curl needs a sandbox labelled trust=high"
}
`)
	e = load(t, Options{Dirs: []string{dir}})
	if !e.HasActionRules() {
		t.Fatal("no action rules found")
	}
	for _, c := range []struct {
		a    Action
		deny string
	}{
		{Action{Action: ActionFileRead, Path: "data/x.csv"}, ""},
		{Action{Action: ActionFileRead, Path: "secrets/key"}, "secrets/key: agents may read only under data/"},
		{Action{Action: ActionFileWrite, Path: "secrets/key"}, ""},
		{Action{Action: ActionExec, Command: []string{"curl", "x"}}, "curl needs a sandbox labelled trust=high"},
		{Action{Action: ActionExec, Command: []string{"curl", "x"}, Sandbox: ActionSandbox{Labels: map[string]string{"trust": "high"}}}, ""},
	} {
		d, err := e.EvalAction(ctx, c.a)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if len(d.Deny) > 0 {
			got = d.Deny[0]
		}
		if got != c.deny || d.Allowed() != (c.deny == "") {
			t.Errorf("%+v: deny %q, want %q", c.a, d.Deny, c.deny)
		}
	}
	d1, _ := e.EvalAction(ctx, Action{Action: ActionFileRead, Path: "a"})
	d2, _ := e.EvalAction(ctx, Action{Action: ActionFileRead, Path: "a"})
	d3, _ := e.EvalAction(ctx, Action{Action: ActionFileRead, Path: "b"})
	if d1.ID != d2.ID || d1.ID == d3.ID || d1.BundleDigest != e.BundleDigest() {
		t.Errorf("decision ids: %s %s %s", d1.ID, d2.ID, d3.ID)
	}
	// Admission is not affected by deny_action rules.
	if d := eval(t, e, okWorkflow(), vmHost); !d.Allowed() {
		t.Errorf("admission with action rules: %v", d.Deny)
	}
}

// TestEvalActionIdentity: the action input names the server's caller, so
// a rule can be per identity (docs/policy.md's example).
func TestEvalActionIdentity(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "identity.rego"), `package agentsandbox

deny_action contains msg if {
	input.action == "create"
	input.identity.role != "admin"
	count(input.step.network.allow) > 0
	msg := sprintf("%s: only admins create sandboxes with network", [input.identity.name])
}
`)
	e := load(t, Options{Dirs: []string{dir}})
	step := map[string]any{"network": map[string]any{"allow": []string{"example.com:443"}}}
	for _, c := range []struct {
		id   *ActionIdentity
		deny string
	}{
		{&ActionIdentity{Name: "ci", Role: "user"}, "ci: only admins create sandboxes with network"},
		{&ActionIdentity{Name: "ops", Role: "admin"}, ""},
	} {
		d, err := e.EvalAction(context.Background(), Action{Action: ActionCreate, Identity: c.id, Step: step})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(d.Deny, "; "); got != c.deny {
			t.Errorf("%+v: deny %q, want %q", c.id, got, c.deny)
		}
	}
	// Without an identity (the operator's own process) the field is
	// absent, and the input is what it was before identities.
	b, _ := json.Marshal(Action{Action: ActionExec})
	if strings.Contains(string(b), "identity") {
		t.Errorf("an action without an identity: %s", b)
	}
}
