package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

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
		"WAVE  STEP          VCPU  MEMORY  PIDS  DISK  TIMEOUT  BANDWIDTH  NETWORK  ISOLATION  HYPERVISOR  NEEDS\n",
		"1     prepare       2     2GiB    512   4GiB  5m0s     unlimited  none     vm         qemu        -\n",
		"2     train-forest  4     4GiB    512   4GiB  1h30m0s  unlimited  none     vm         qemu        prepare\n",
		"2     train-linear  2     2GiB",
		"3     compare       1     512MiB  512   4GiB  30m0s    unlimited  none     vm         qemu        train-forest,train-linear\n",
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
	if p.Hash.String() == "" || p.Nixpkgs == nil || p.Nixpkgs.Rev != "8f3e1f807051e32d8c95cd12b9b421623850a34d" {
		t.Errorf("header: %+v", p)
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
