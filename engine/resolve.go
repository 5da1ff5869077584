package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/microvm"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Resolve decides the isolation every step of w runs with on a host with
// the facts h, and returns a copy of w that carries it (w is not changed).
// It is the one place that decides isolation: Run runs, and the policy
// judges, what it returns; validate, plan and policy eval show and admit
// the same.
//
// A step's isolation is override when that is set, else the step's own.
// auto becomes vm when the host can run VMs ("vm" in h.Isolation: root,
// Nix and qemu), KVM runs a guest there (h.KVM, probed) and the workflow
// pins nixpkgs (a VM is a NixOS system built from it); else namespace.
// Every fact the rule uses is in the policy's input (input.host and
// input.workflow.nixpkgs), next to the isolation it chose.
func Resolve(w *workflow.Workflow, override workflow.Isolation, h policy.Host) (*workflow.Workflow, error) {
	if w == nil {
		return nil, errors.New("resolve isolation: no workflow")
	}
	switch override {
	case "", workflow.IsolationAuto, workflow.IsolationVM, workflow.IsolationNamespace:
	default:
		return nil, fmt.Errorf("isolation %q: want auto, vm or namespace", override)
	}
	auto := workflow.IsolationNamespace
	if slices.Contains(h.Isolation, string(workflow.IsolationVM)) && h.KVM && w.Nixpkgs != nil {
		auto = workflow.IsolationVM
	}
	out := *w
	out.Steps = make([]workflow.Step, len(w.Steps))
	for i, s := range w.Steps {
		if override != "" {
			s.Isolation = override
		}
		switch s.Isolation {
		case workflow.IsolationAuto, "":
			s.Isolation = auto
		case workflow.IsolationVM, workflow.IsolationNamespace:
		default:
			return nil, fmt.Errorf("step %q: isolation %q: want auto, vm or namespace", s.Name, s.Isolation)
		}
		out.Steps[i] = s
	}
	return &out, nil
}

// Policy admits a resolved workflow on a host; *policy.Engine (policy.Load)
// is the one the CLI passes.
type Policy interface {
	Eval(ctx context.Context, w *workflow.Workflow, h policy.Host) (*policy.Decision, error)
}

// ErrNoPolicy is Run's answer to Options without a Policy: nothing runs
// unadmitted.
var ErrNoPolicy = errors.New("no admission policy: Options.Policy is required (policy.Load gives the default policy); nothing runs unadmitted")

// admit evaluates the policy on the resolved plan and the host's facts, and
// tells the caller the decision (EventAdmitted) whatever it is. A denial is
// a *policy.DeniedError listing every message; a policy that fails to
// evaluate is the policy's error (a *policy.SourceError for a mistake in
// its sources).
func admit(ctx context.Context, o Options, plan *workflow.Workflow, emit func(Event)) (*policy.Decision, error) {
	if o.Policy == nil {
		return nil, ErrNoPolicy
	}
	d, err := o.Policy.Eval(ctx, plan, o.Host.Policy())
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, errors.New("admission policy gave no decision")
	}
	emit(Event{Time: time.Now(), Kind: EventAdmitted, Decision: d})
	if !d.Allowed() {
		return d, &policy.DeniedError{Decision: d}
	}
	return d, nil
}

// refuse stops, before anything is created, an admitted plan this host
// cannot run. It comes after admission, so that what the policy denies
// (open egress, egress on a namespace step where a team requires vm) is
// reported as a denial. Egress rules the proxy cannot enforce ("*", which
// the default policy denies) are refused here, never opened, and so is a
// vm step whose hypervisor the vm backend does not run (the schema accepts
// cloud-hypervisor and firecracker), before its runner is built.
func refuse(steps []workflow.Step, o Options) error {
	for _, s := range steps {
		if s.Network.HasEgress() {
			if _, err := egress.NewRules(s.Network.Allow, nil); err != nil {
				return fmt.Errorf("step %q: network.allow: %w", s.Name, err)
			}
		}
		if s.Isolation == workflow.IsolationNamespace && len(s.Packages) > 0 && !o.Host.Nix {
			return fmt.Errorf("step %q lists packages %q, which need Nix, and Nix is not installed: %w", s.Name, s.Packages, ErrNoNix)
		}
		if s.Isolation == workflow.IsolationVM {
			// Before the build: a runner for a hypervisor the vm backend
			// does not run would be built only to be refused at launch.
			if err := microvm.CheckHypervisor(s.Hypervisor); err != nil {
				return fmt.Errorf("step %q: %w", s.Name, err)
			}
		}
		if o.Backends[s.Isolation] == nil {
			return fmt.Errorf("step %q: %s isolation is not available on this host%s", s.Name, s.Isolation, o.Host.why(s.Isolation))
		}
	}
	return nil
}
