package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/nixgen"
	"github.com/agentsandbox/agentsandbox/workflow"
)

func TestPlanText(t *testing.T) {
	var out bytes.Buffer
	const file = "../../examples/ml-experiment.yaml"
	if err := runPlan(context.Background(), Stdio{Out: &out, Err: &out}, planOptions{}, []string{file}); err != nil {
		t.Fatalf("runPlan: %v\n%s", err, out.String())
	}
	w, _, err := workflow.ParseFile(file)
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"workflow ml-experiment (" + file + ")\n",
		"hash     " + w.Hash().String() + "\n",
		"nixpkgs  github:NixOS/nixpkgs/",
		"microvm  github:microvm-nix/microvm.nix/" + nixgen.DefaultMicrovmRev + " (default; needs nixpkgs 25.11 or later)\n",
		"WAVE  STEP          VCPU  MEMORY  PIDS  DISK  TIMEOUT  BANDWIDTH  NETWORK  ISOLATION  HYPERVISOR  ENVIRONMENT           NEEDS\n",
		"1     prepare       2     2GiB    512   4GiB  5m0s     unlimited  none     vm         qemu        env-",
		"2     train-forest  4     4GiB    512   4GiB  1h30m0s  unlimited  none     vm         qemu        env-",
		"2     train-linear  2     2GiB",
		"3     compare       1     512MiB  512   4GiB  30m0s    unlimited  none     vm         qemu        env-",
		"  train-forest,train-linear\n",
		"\n4 environments for 4 steps that need Nix:\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("plan output lacks %q:\n%s", want, got)
		}
	}
}

func TestPlanJSON(t *testing.T) {
	var out bytes.Buffer
	if err := runPlan(context.Background(), Stdio{Out: &out, Err: &out}, planOptions{json: true}, []string{"../../examples/ci-step.yaml"}); err != nil {
		t.Fatalf("runPlan: %v\n%s", err, out.String())
	}
	var p planJSON
	if err := json.Unmarshal(out.Bytes(), &p); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	if p.Name != "ci-step" || len(p.Waves) != 2 || p.Waves[0][0].Name != "test" || p.Waves[1][0].Name != "build" {
		t.Fatalf("plan: %+v", p)
	}
	test := p.Waves[0][0]
	if test.Resources.Bandwidth != 50e6 || test.Resources.Memory != 1<<30 || test.Isolation != workflow.IsolationVM ||
		len(test.Network.Allow) != 2 || test.Network.Allow[1] != "goproxy.corp.example:443" {
		t.Errorf("test step: %+v", test)
	}
	if p.Hash.String() == "" || p.Nixpkgs == nil || p.Nixpkgs.Rev != "8fd9daa3db09ced9700431c5b7ad0e8ba199b575" {
		t.Errorf("header: %+v", p)
	}
}

// TestPlanSharedEnvironments: steps that differ only in what travels in
// job.json share one environment, and plan says so in both forms.
func TestPlanSharedEnvironments(t *testing.T) {
	file := writeFile(t, "wf.yaml", `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: shared
nixpkgs: github:NixOS/nixpkgs/8f3e1f807051e32d8c95cd12b9b421623850a34d
defaults:
  isolation: vm
steps:
  - name: a
    packages: [go]
    run: go version
  - name: b
    packages: [go]
    run: go env
    resources: {timeout: 1m}
  - name: c
    packages: [go]
    needs: [a]
    env: {X: "1"}
    run: go vet ./...
  - name: d
    packages: [go, git]
    run: git --version
  - name: e
    isolation: namespace
    run: "true"
`)
	var out, stderr bytes.Buffer
	if err := runPlan(context.Background(), Stdio{Out: &out, Err: &stderr}, planOptions{json: true}, []string{file}); err != nil {
		t.Fatalf("runPlan: %v\n%s", err, out.String())
	}
	var p planJSON
	if err := json.Unmarshal(out.Bytes(), &p); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	if len(p.Environments) != 2 || strings.Join(p.Environments[0].Steps, ",") != "a,b,c" || strings.Join(p.Environments[1].Steps, ",") != "d" {
		t.Fatalf("environments: %+v", p.Environments)
	}
	env := map[string]string{}
	for _, wave := range p.Waves {
		for _, s := range wave {
			env[s.Name] = s.Environment
		}
	}
	if env["a"] != p.Environments[0].Name || env["b"] != env["a"] || env["c"] != env["a"] || env["d"] != p.Environments[1].Name || env["e"] != "" {
		t.Errorf("step environments: %v", env)
	}
	out.Reset()
	if err := runPlan(context.Background(), Stdio{Out: &out, Err: &stderr}, planOptions{}, []string{file}); err != nil {
		t.Fatalf("runPlan: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"2 environments for 4 steps that need Nix:\n",
		p.Environments[0].Name + "  " + p.Environments[0].Hash.String() + "  3: a,b,c\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestPlanInvalid(t *testing.T) {
	bad := writeFile(t, "bad.yaml", badWorkflow)
	code, stdout, stderr := run(t, "plan", bad)
	if code != ExitInvalid || stdout != "" || !strings.Contains(stderr, bad+":7:5: unknown key") {
		t.Errorf("exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	if code, _, _ := run(t, "plan", bad, bad); code != ExitInvalid {
		t.Errorf("two files: exit %d, want %d", code, ExitInvalid)
	}
}
