package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/workflow"
)

const policyTestWorkflow = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: fetch
nixpkgs: github:NixOS/nixpkgs/8f3e1f807051e32d8c95cd12b9b421623850a34d
steps:
  - name: fetch
    isolation: vm
    run: curl https://example.com
    network:
      allow: [%s]
    resources:
      timeout: 1m
      bandwidth: 10Mbit
`

func writeTestFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// policyWorkflow writes a workflow whose one step may reach allow, in a
// folder of its own.
func policyWorkflow(t *testing.T, allow string) string {
	return writeTestFile(t, filepath.Join(t.TempDir(), "wf.yaml"), strings.Replace(policyTestWorkflow, "%s", allow, 1))
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Execute(context.Background(), Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}, args)
	return code, out.String(), errb.String()
}

func TestPolicyEvalAllowsAndDenies(t *testing.T) {
	hostFacts := writeTestFile(t, filepath.Join(t.TempDir(), "host.json"), `{"isolation":["namespace","vm"],"hypervisors":["qemu"],"kvm":true,"nix":true,"uid":1000}`)
	code, out, stderr := runCLI(t, "policy", "eval", policyWorkflow(t, `"example.com:443"`), "--host-facts", hostFacts)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	var d policy.Decision
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("stdout is not a decision: %v\n%s", err, out)
	}
	if !d.Allowed() || d.ID.IsZero() || d.BundleDigest.IsZero() || d.InputDigest.IsZero() {
		t.Fatalf("decision = %+v", d)
	}

	code, out, _ = runCLI(t, "policy", "eval", policyWorkflow(t, `"0.0.0.0/0:443"`), "--host-facts", hostFacts)
	if code != ExitDenied {
		t.Fatalf("open egress: exit %d, want %d", code, ExitDenied)
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	want := []string{`step "fetch": network.allow "0.0.0.0/0:443" opens all egress; list the hosts or prefixes the step needs`}
	if !slices.Equal(d.Deny, want) {
		t.Fatalf("deny = %q, want %q", d.Deny, want)
	}
}

func TestPolicyEvalTeamRuleNextToWorkflow(t *testing.T) {
	wf := policyWorkflow(t, `"example.com:443"`)
	writeTestFile(t, filepath.Join(filepath.Dir(wf), ".agentsandbox", "policy", "team.rego"), `package agentsandbox.team

deny contains msg if {
	some step in input.workflow.steps
	some entry in step.network.allow
	startswith(entry, "example.com")
	msg := sprintf("step %q: team rule: no example.com", [step.name])
}
`)
	code, out, _ := runCLI(t, "policy", "eval", wf)
	if code != ExitDenied || !strings.Contains(out, `step \"fetch\": team rule: no example.com`) || !strings.Contains(out, `"team.rego"`) {
		t.Fatalf("exit %d, out %s", code, out)
	}
}

func TestPolicyEvalInvalidInputs(t *testing.T) {
	dir := t.TempDir()
	bad := writeTestFile(t, filepath.Join(dir, "pol", "bad.rego"), "package agentsandbox.x\n\ndeny contains msg if {\n")
	wf := policyWorkflow(t, `"example.com:443"`)
	code, _, stderr := runCLI(t, "policy", "eval", wf, "--policy", filepath.Dir(bad))
	if code != ExitInvalid || !strings.Contains(stderr, bad+":4:0: unexpected eof token") {
		t.Fatalf("syntax error: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "policy", "eval", writeTestFile(t, filepath.Join(dir, "bad.yaml"), "kind: Nope\n"))
	if code != ExitInvalid || !strings.Contains(stderr, "bad.yaml:") {
		t.Fatalf("bad workflow: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "policy", "eval", wf, "--host-facts", writeTestFile(t, filepath.Join(dir, "h.json"), `{"kvm": "yes"}`))
	if code != ExitInvalid || !strings.Contains(stderr, "--host-facts") {
		t.Fatalf("bad host facts: exit %d, stderr %q", code, stderr)
	}
	if code, _, _ := runCLI(t, "policy", "eval"); code != ExitInvalid {
		t.Fatalf("no FILE: exit %d", code)
	}
}

func TestPolicyTestCommand(t *testing.T) {
	code, out, stderr := runCLI(t, "policy", "test", "-v", "../../policy/testdata/team")
	if code != ExitOK || !strings.Contains(out, "PASS: 4/4") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, stderr)
	}

	dir := t.TempDir()
	writeTestFile(t, filepath.Join(dir, "p_test.rego"), "package agentsandbox.p_test\n\ntest_fails if { 1 == 2 }\n")
	code, out, _ = runCLI(t, "policy", "test", dir)
	if code != ExitStepFailed || !strings.Contains(out, "FAIL: 1/1") {
		t.Fatalf("failing test: exit %d\n%s", code, out)
	}

	bad := writeTestFile(t, filepath.Join(t.TempDir(), "p_test.rego"), "package x\n\ntest_a if { http.send({}) }\n")
	code, _, stderr = runCLI(t, "policy", "test", filepath.Dir(bad))
	if code != ExitInvalid || !strings.Contains(stderr, bad+":3:13: undefined function http.send (disabled") {
		t.Fatalf("compile error: exit %d, stderr %q", code, stderr)
	}
}

func TestAdmit(t *testing.T) {
	wfPath := policyWorkflow(t, `"example.com:443", "*"`)
	w, _, err := workflow.ParseFile(wfPath)
	if err != nil {
		t.Fatal(err)
	}
	w.Steps[0].Resources.TimeoutMS = 0
	host := policy.Host{Isolation: []string{"namespace", "vm"}, KVM: true, Nix: true}
	var stderr bytes.Buffer
	state := t.TempDir() // the decision cache's state directory
	admitWith := func(opts policyOptions) (*policy.Decision, error) {
		pol, err := cachedPolicy(opts, wfPath, state)
		if err != nil {
			return nil, err
		}
		return admit(context.Background(), pol, w, host, &stderr)
	}
	d, err := admitWith(policyOptions{})
	if exitCode(err) != ExitDenied || d == nil {
		t.Fatalf("admit: %v (exit %d)", err, exitCode(err))
	}
	var denied *policy.DeniedError
	if !errors.As(err, &denied) || !strings.Contains(err.Error(), `deny: step "fetch": network.allow "*" opens all egress`) {
		t.Fatalf("err = %v", err)
	}
	const warning = "warning: step \"fetch\": resources.timeoutMs is not set, so the step may run forever; set a timeout\n"
	if got := stderr.String(); got != warning || d.Cached {
		t.Errorf("stderr = %q, cached %v", got, d.Cached)
	}
	// Again: the same decision, read from the cache, warnings and all.
	stderr.Reset()
	again, err := admitWith(policyOptions{})
	if exitCode(err) != ExitDenied || !again.Cached || again.ID != d.ID || !slices.Equal(again.Deny, d.Deny) || stderr.String() != warning {
		t.Fatalf("cached admission: %v, %+v, stderr %q", err, again, stderr.String())
	}

	// Data from the flags lifts the deny; the workflow's folder is read too.
	data := writeTestFile(t, filepath.Join(t.TempDir(), "d.yaml"), "agentsandbox:\n  open_egress: []\n  require_egress_port: false\n  warn_no_timeout: false\n")
	stderr.Reset()
	if d, err = admitWith(policyOptions{DataFiles: []string{data}}); err != nil || !d.Allowed() || d.Cached || stderr.Len() != 0 {
		t.Fatalf("with data: %v, %+v, stderr %q", err, d, stderr.String())
	}

	bad := writeTestFile(t, filepath.Join(filepath.Dir(wfPath), ".agentsandbox", "policy", "bad.rego"), "package agentsandbox\n\ndeny contains x if { x := undefined_thing }\n")
	// A new team rule is a new bundle: not the cached decision, and its
	// mistake is reported.
	_, err = admitWith(policyOptions{})
	if exitCode(err) != ExitInvalid || !strings.Contains(err.Error(), bad+":3:") {
		t.Fatalf("bad team rule: %v (exit %d)", err, exitCode(err))
	}
}

func TestPolicyEvalPrintInput(t *testing.T) {
	hostFacts := writeTestFile(t, filepath.Join(t.TempDir(), "host.json"), `{"isolation":["vm","namespace"],"hypervisors":["qemu"],"kvm":true,"nix":true,"uid":0}`)
	code, out, stderr := runCLI(t, "policy", "eval", "--print-input", "--host-facts", hostFacts, policyWorkflow(t, `"0.0.0.0/0:443"`))
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var in struct {
		Workflow workflow.Workflow `json:"workflow"`
		Host     policy.Host       `json:"host"`
	}
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if in.Workflow.Steps[0].Network.Allow[0] != "0.0.0.0/0:443" || !slices.Equal(in.Host.Isolation, []string{"namespace", "vm"}) {
		t.Fatalf("input = %s", out)
	}
}
