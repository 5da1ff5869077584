package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/fakebackend"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/workflow"
)

func TestResolve(t *testing.T) {
	pinned := &workflow.Nixpkgs{Ref: "github:NixOS/nixpkgs/8f3e1f807051e32d8c95cd12b9b421623850a34d", Rev: "8f3e1f807051e32d8c95cd12b9b421623850a34d"}
	vmHost := policy.Host{Isolation: []string{"namespace", "vm"}, KVM: true, Nix: true}
	noKVM := policy.Host{Isolation: []string{"namespace", "vm"}, KVM: false, Nix: true}
	noVM := policy.Host{Isolation: []string{"namespace"}, KVM: true, Nix: true} // KVM, but no root, Nix or qemu for VMs
	for _, tc := range []struct {
		name     string
		nixpkgs  *workflow.Nixpkgs
		host     policy.Host
		override workflow.Isolation
		step     workflow.Isolation
		want     workflow.Isolation
	}{
		{"auto on a vm host", pinned, vmHost, "", workflow.IsolationAuto, workflow.IsolationVM},
		{"auto without KVM", pinned, noKVM, "", workflow.IsolationAuto, workflow.IsolationNamespace},
		{"auto where VMs cannot run", pinned, noVM, "", workflow.IsolationAuto, workflow.IsolationNamespace},
		{"auto without nixpkgs", nil, vmHost, "", workflow.IsolationAuto, workflow.IsolationNamespace},
		{"empty is auto", pinned, vmHost, "", "", workflow.IsolationVM},
		{"vm stays vm without KVM", pinned, noKVM, "", workflow.IsolationVM, workflow.IsolationVM},
		{"namespace stays namespace", pinned, vmHost, "", workflow.IsolationNamespace, workflow.IsolationNamespace},
		{"override namespace", pinned, vmHost, workflow.IsolationNamespace, workflow.IsolationVM, workflow.IsolationNamespace},
		{"override vm", pinned, noKVM, workflow.IsolationVM, workflow.IsolationNamespace, workflow.IsolationVM},
		{"override auto", pinned, noKVM, workflow.IsolationAuto, workflow.IsolationVM, workflow.IsolationNamespace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &workflow.Workflow{Name: "w", Nixpkgs: tc.nixpkgs, Steps: []workflow.Step{{Name: "s", Isolation: tc.step}}}
			got, err := Resolve(w, tc.override, tc.host)
			if err != nil {
				t.Fatal(err)
			}
			if got.Steps[0].Isolation != tc.want {
				t.Errorf("isolation %q, want %q", got.Steps[0].Isolation, tc.want)
			}
			if w.Steps[0].Isolation != tc.step {
				t.Errorf("Resolve changed the workflow it was given: %q", w.Steps[0].Isolation)
			}
		})
	}
	if _, err := Resolve(&workflow.Workflow{}, "container", policy.Host{}); err == nil || !strings.Contains(err.Error(), `isolation "container"`) {
		t.Errorf("unknown override: %v", err)
	}
}

// TestResolveMatchesHostPolicy: the facts Resolve decides by are the ones
// the policy sees, whatever the Host.
func TestResolveMatchesHostPolicy(t *testing.T) {
	w := &workflow.Workflow{Name: "w", Nixpkgs: &workflow.Nixpkgs{Ref: "r", Rev: "r"}, Steps: []workflow.Step{{Name: "s", Isolation: workflow.IsolationAuto}}}
	for _, h := range []Host{
		{Root: true, Nix: true, QEMU: true, KVMUsable: true},
		{Root: false, Nix: true, QEMU: true, KVMUsable: true},
		{Root: true, Nix: false, QEMU: true, KVMUsable: true},
		{Root: true, Nix: true, QEMU: false, KVMUsable: true},
		{Root: true, Nix: true, QEMU: true, KVMUsable: false},
	} {
		got, err := Resolve(w, "", h.Policy())
		if err != nil {
			t.Fatal(err)
		}
		want := workflow.IsolationNamespace
		if h.Root && h.Nix && h.QEMU && h.KVMUsable {
			want = workflow.IsolationVM
		}
		if got.Steps[0].Isolation != want {
			t.Errorf("%+v: auto became %s, want %s", h, got.Steps[0].Isolation, want)
		}
	}
}

func TestRunRequiresPolicy(t *testing.T) {
	f := newFixture(t, pipelineYAML)
	b := fakebackend.New()
	o := f.options(t, b, nil)
	o.Policy = nil
	res, err := Run(context.Background(), f.w, o)
	if !errors.Is(err, ErrNoPolicy) || res != nil {
		t.Fatalf("Run without a policy: %v, %+v", err, res)
	}
	if len(b.Runs()) != 0 {
		t.Error("steps ran without a policy")
	}
}

// TestRunAdmitsResolvedPlan: the policy sees each step's resolved
// isolation (here the --isolation override), every warning and denial
// reaches the caller, and a denied run runs nothing and writes no record.
func TestRunAdmitsResolvedPlan(t *testing.T) {
	f := newFixture(t, pipelineYAML)
	dir := filepath.Join(t.TempDir(), "team")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rule := `package agentsandbox.team

deny contains msg if {
	some step in input.workflow.steps
	step.isolation != "vm"
	msg := sprintf("step %q: isolation %s; team rule: every step runs in a vm", [step.name, step.isolation])
}

warn contains "team: looked" if true
`
	if err := os.WriteFile(filepath.Join(dir, "team.rego"), []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Load(context.Background(), policy.Options{Dirs: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	b := fakebackend.New()
	var admitted []*policy.Decision
	o := f.options(t, b, func(e Event) {
		if e.Kind == EventAdmitted {
			admitted = append(admitted, e.Decision)
		}
	})
	o.Policy = p
	o.Isolation = workflow.IsolationAuto // the workflow's steps are auto already; auto is namespace here
	res, err := Run(context.Background(), f.w, o)
	var denied *policy.DeniedError
	if !errors.As(err, &denied) || res != nil {
		t.Fatalf("Run: %v, %+v; want a denial", err, res)
	}
	want := []string{
		`step "count": isolation namespace; team rule: every step runs in a vm`,
		`step "double": isolation namespace; team rule: every step runs in a vm`,
		`step "report": isolation namespace; team rule: every step runs in a vm`,
	}
	if strings.Join(denied.Decision.Deny, "\n") != strings.Join(want, "\n") {
		t.Errorf("deny = %q, want %q", denied.Decision.Deny, want)
	}
	if len(admitted) != 1 || admitted[0] != denied.Decision || strings.Join(admitted[0].Warn, "\n") != "team: looked" {
		t.Errorf("admitted events: %+v", admitted)
	}
	if len(b.Runs()) != 0 {
		t.Error("steps ran despite the denial")
	}
	if ents, _ := os.ReadDir(filepath.Join(f.store.Dir(), "records")); len(ents) != 0 {
		t.Errorf("records after a denial: %v", ents)
	}
}
