package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const openEgress = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: egress
nixpkgs: github:NixOS/nixpkgs/8f3e1f807051e32d8c95cd12b9b421623850a34d
steps:
  - name: fetch
    isolation: vm
    run: curl https://example.org
    network:
      allow: ["0.0.0.0/0:443"]
    resources: {timeout: 1m}
`

const plain = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: plain
steps:
  - name: train
    run: echo hi
    resources: {timeout: 1m, memory: 3GiB}
`

func writeWorkflow(t *testing.T, dir, text string) string {
	t.Helper()
	p := filepath.Join(dir, "wf.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func execute(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Execute(context.Background(), Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}, args)
	return code, out.String(), errb.String()
}

func TestValidateDeniesOpenEgress(t *testing.T) {
	p := writeWorkflow(t, t.TempDir(), openEgress)
	for _, cmd := range []string{"validate", "plan"} {
		code, _, stderr := execute(t, cmd, p)
		if code != ExitDenied {
			t.Errorf("%s: exit %d, want %d; stderr:\n%s", cmd, code, ExitDenied, stderr)
		}
		if !strings.Contains(stderr, `step "fetch": network.allow "0.0.0.0/0:443" opens all egress`) {
			t.Errorf("%s: the denial does not name the step and entry:\n%s", cmd, stderr)
		}
	}
}

func TestTeamPolicyNextToWorkflowIsEnforced(t *testing.T) {
	dir := t.TempDir()
	p := writeWorkflow(t, dir, plain)
	if code, _, stderr := execute(t, "validate", p); code != ExitOK {
		t.Fatalf("before the team rule: exit %d\n%s", code, stderr)
	}
	rules := filepath.Join(dir, ".agentsandbox", "policy")
	if err := os.MkdirAll(rules, 0o755); err != nil {
		t.Fatal(err)
	}
	rule := `package agentsandbox

deny contains msg if {
	some step in input.workflow.steps
	step.resources.memory > 2147483648
	msg := sprintf("step %q: team rule: at most 2GiB of memory", [step.name])
}
`
	if err := os.WriteFile(filepath.Join(rules, "team.rego"), []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := execute(t, "validate", p)
	if code != ExitDenied || !strings.Contains(stderr, `step "train": team rule: at most 2GiB of memory`) {
		t.Fatalf("with the team rule: exit %d, want %d\n%s", code, ExitDenied, stderr)
	}
	// A broken team rule is invalid input, reported with FILE:ROW:COL.
	if err := os.WriteFile(filepath.Join(rules, "team.rego"), []byte("package agentsandbox\n\ndeny contains msg if {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = execute(t, "validate", p)
	if code != ExitInvalid || !strings.Contains(stderr, "team.rego:") {
		t.Fatalf("with a broken team rule: exit %d, want %d\n%s", code, ExitInvalid, stderr)
	}
}

// TestCommandsJudgeTheResolvedPlan: validate, plan and apply admit the
// same plan, each step with the isolation it runs with here (the auto
// step of plain is a namespace jail on a host without Nix or KVM, and
// --isolation namespace makes it one anywhere), and apply prints every
// warning and denial and exits with 3 as before, running nothing.
func TestCommandsJudgeTheResolvedPlan(t *testing.T) {
	t.Setenv(accelEnv, "tcg") // no KVM: auto is namespace whatever this host has
	dir := t.TempDir()
	p := writeWorkflow(t, dir, strings.Replace(plain, "resources: {timeout: 1m, memory: 3GiB}", "resources: {memory: 3GiB}", 1))
	rules := filepath.Join(dir, ".agentsandbox", "policy")
	if err := os.MkdirAll(rules, 0o755); err != nil {
		t.Fatal(err)
	}
	rule := `package agentsandbox.team

deny contains msg if {
	some step in input.workflow.steps
	step.isolation != "vm"
	msg := sprintf("step %q: isolation %s; team rule: every step runs in a vm", [step.name, step.isolation])
}
`
	if err := os.WriteFile(filepath.Join(rules, "team.rego"), []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	const deny = `deny: step "train": isolation namespace; team rule: every step runs in a vm`
	const warn = "warning: step \"train\": resources.timeoutMs is not set, so the step may run forever; set a timeout\n"
	state := filepath.Join(t.TempDir(), "state")
	for _, args := range [][]string{
		{"validate", p},
		{"plan", p},
		{"apply", "--state-dir", state, p},
		{"apply", "--json", "--state-dir", state, p},
		{"apply", "--isolation", "namespace", "--accel", "kvm", "--state-dir", state, p},
	} {
		code, stdout, stderr := execute(t, args...)
		if code != ExitDenied || !strings.Contains(stderr, deny) || !strings.HasPrefix(stderr, warn) {
			t.Errorf("%s: exit %d, want %d with the warning first and %q\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, ExitDenied, deny, stdout, stderr)
		}
		if args[0] == "apply" && stdout != "" {
			t.Errorf("%s: a denied run printed %q", strings.Join(args, " "), stdout)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(state, "records")); len(ents) != 0 {
		t.Errorf("denied runs left records: %v", ents)
	}
}
