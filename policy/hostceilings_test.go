package policy

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/workflow"
)

// capHost is vmHost with the capacity serve gives its admissions: 2 CPUs,
// 23 GiB of memory and 71 GiB free where the workspaces are.
func capHost() Host {
	h := vmHost
	h.Capacity = &Capacity{CPUs: 2, MemoryBytes: 23 << 30, DiskBytes: 71 << 30, DiskPath: "/var/lib/agentsandbox/runs"}
	return h
}

// TestHostCeilings: with the host's capacity in the input, a step asking
// for more vcpu, memory or disk than the host has is denied with the
// ceiling and the host's figure; at the host's figures it is allowed; the
// operator's data narrows, widens or turns each off; without a capacity
// (apply, validate, plan) the rule does not judge.
func TestHostCeilings(t *testing.T) {
	huge := func(w *workflow.Workflow) {
		for i := range w.Steps {
			w.Steps[i].Resources.VCPU, w.Steps[i].Resources.Memory, w.Steps[i].Resources.Disk = 16, 64<<30, 8<<40
		}
	}
	w := okWorkflow()
	huge(w)
	e := load(t, Options{})
	d := eval(t, e, w, capHost())
	want := []string{
		`step "build": resources.disk 8.0TiB is above this host's ceiling 71.0GiB (1 × the space free on /var/lib/agentsandbox/runs, 71.0GiB; data.agentsandbox.host_ceilings.disk)`,
		`step "build": resources.memory 64.0GiB is above this host's ceiling 23.0GiB (1 × its memory, 23.0GiB; data.agentsandbox.host_ceilings.memory)`,
		`step "build": resources.vcpu 16 is above this host's ceiling 2 (1 × its 2 CPUs; data.agentsandbox.host_ceilings.vcpu)`,
		`step "test": resources.disk 8.0TiB is above this host's ceiling 71.0GiB (1 × the space free on /var/lib/agentsandbox/runs, 71.0GiB; data.agentsandbox.host_ceilings.disk)`,
		`step "test": resources.memory 64.0GiB is above this host's ceiling 23.0GiB (1 × its memory, 23.0GiB; data.agentsandbox.host_ceilings.memory)`,
		`step "test": resources.vcpu 16 is above this host's ceiling 2 (1 × its 2 CPUs; data.agentsandbox.host_ceilings.vcpu)`,
	}
	if !slices.Equal(d.Deny, want) {
		t.Errorf("deny:\n%q\nwant:\n%q", d.Deny, want)
	}
	// Without the host's capacity (the operator's apply, validate, plan)
	// only the fixed ceilings judge: 8 TiB of disk is not one of them.
	d = eval(t, e, w, vmHost)
	if len(d.Deny) != 0 {
		t.Errorf("without capacity: %q", d.Deny)
	}
	// At the host's figures exactly: allowed.
	at := okWorkflow()
	for i := range at.Steps {
		at.Steps[i].Resources.VCPU, at.Steps[i].Resources.Memory, at.Steps[i].Resources.Disk = 2, 23<<30, 71<<30
	}
	if d := eval(t, e, at, capHost()); !d.Allowed() {
		t.Errorf("at the host's figures: %q", d.Deny)
	}
	// The operator halves memory, quadruples disk (sparse images
	// overcommitted) and turns the vcpu ceiling off.
	data := writeFile(t, t.TempDir()+"/team.yaml", "agentsandbox:\n  host_ceilings:\n    memory: 0.5\n    disk: 4\n    vcpu: null\n")
	e = load(t, Options{DataFiles: []string{data}})
	d = eval(t, e, at, capHost())
	want = []string{
		`step "build": resources.memory 23.0GiB is above this host's ceiling 11.5GiB (0.5 × its memory, 23.0GiB; data.agentsandbox.host_ceilings.memory)`,
		`step "test": resources.memory 23.0GiB is above this host's ceiling 11.5GiB (0.5 × its memory, 23.0GiB; data.agentsandbox.host_ceilings.memory)`,
	}
	if !slices.Equal(d.Deny, want) {
		t.Errorf("with the team's data:\n%q\nwant:\n%q", d.Deny, want)
	}
	// 16 vCPUs pass with that ceiling off; 8 TiB is still over four times
	// the free space.
	d = eval(t, e, w, capHost())
	mentions := func(s string) bool {
		return slices.ContainsFunc(d.Deny, func(m string) bool { return strings.Contains(m, s) })
	}
	if mentions("host_ceilings.vcpu") || !mentions("ceiling 284.0GiB (4 × the space free") {
		t.Errorf("the huge workflow with the team's data: %q", d.Deny)
	}
}

// TestHostCeilingsData: a value the rule would not take is refused at
// load, not a ceiling silently off.
func TestHostCeilingsData(t *testing.T) {
	for data, msg := range map[string]string{
		"memory: 50%":   `host_ceilings.memory is 50% (string)`,
		"cpu: 1":        `host_ceilings.cpu: not a resource this ceiling takes; want disk, memory, vcpu`,
		"disk: true":    `host_ceilings.disk is true`,
		"vcpu: -1":      `host_ceilings.vcpu is -1`,
		"- just a list": `host_ceilings is not an object`,
	} {
		file := writeFile(t, t.TempDir()+"/d.yaml", "agentsandbox:\n  host_ceilings:\n    "+data+"\n")
		_, err := Load(context.Background(), Options{DataFiles: []string{file}})
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("host_ceilings %q: %v, want %q", data, err, msg)
		}
	}
	file := writeFile(t, t.TempDir()+"/d.yaml", "agentsandbox:\n  host_ceilings:\n    vcpu: false\n    memory: null\n    disk: 2.5\n")
	if _, err := Load(context.Background(), Options{DataFiles: []string{file}}); err != nil {
		t.Errorf("false, null and 2.5: %v", err)
	}
}
