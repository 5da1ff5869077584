package engine

import (
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/nixgen"
	"github.com/agentsandbox/agentsandbox/workflow"
)

func TestRealiseAttrs(t *testing.T) {
	res := workflow.Resources{VCPU: 1, Memory: 512 << 20}
	vmQ := workflow.Step{Name: "train", Isolation: workflow.IsolationVM, Hypervisor: workflow.HypervisorQEMU, Resources: res}
	vmCH := workflow.Step{Name: "train", Isolation: workflow.IsolationVM, Hypervisor: workflow.HypervisorCloudHypervisor, Resources: res}
	ns := workflow.Step{Name: "train", Isolation: workflow.IsolationNamespace, Hypervisor: workflow.HypervisorQEMU, Packages: []string{"python3"}, Resources: res}
	name := func(s workflow.Step) string {
		e, err := nixgen.EnvironmentOf(&s)
		if err != nil {
			t.Fatal(err)
		}
		return e.Hash().Name()
	}
	cases := []struct {
		kvm    bool
		step   workflow.Step
		attr   string
		runner bool
	}{
		{true, vmQ, "packages.x86_64-linux." + name(vmQ), true},
		{false, vmQ, "legacyPackages.x86_64-linux.tcgRunners." + name(vmQ), true},
		{false, vmCH, "packages.x86_64-linux." + name(vmCH), true}, // no emulation; refuse stops it before any build (microvm.CheckHypervisor)
		{false, ns, "legacyPackages.x86_64-linux.stepEnvs." + name(ns), false},
	}
	for _, c := range cases {
		n := &NixRealiser{KVM: c.kvm, KVMReason: "qemu -accel kvm with -cpu host,+x2apic,-sgx failed"}
		attr, runner, _, note, err := n.attrFor(c.step)
		if err != nil || attr != c.attr || runner != c.runner {
			t.Errorf("kvm=%v %s/%s: got %s %v %v, want %s %v", c.kvm, c.step.Isolation, c.step.Hypervisor, attr, runner, err, c.attr, c.runner)
		}
		// The software-emulation runner says why it was chosen, for the vm
		// backend's decision; no other attribute has a note.
		if tcg := strings.Contains(c.attr, "tcgRunners"); tcg != strings.Contains(note, "KVM cannot run microvm.nix's guests here: qemu -accel kvm with -cpu host") || (!tcg && note != "") {
			t.Errorf("kvm=%v %s/%s: note %q", c.kvm, c.step.Isolation, c.step.Hypervisor, note)
		}
	}
	// Another step of the same environment builds the same attribute.
	other := vmQ
	other.Name, other.Run, other.Resources.TimeoutMS = "eval", "true", 1000
	a, _, _, _, _ := (&NixRealiser{KVM: true}).attrFor(vmQ)
	b, _, _, _, _ := (&NixRealiser{KVM: true}).attrFor(other)
	if a != b {
		t.Errorf("same environment, attributes %s and %s", a, b)
	}
	if got := ownerOf([]string{"a", "b", "c", "d"}); got != "a, b and 2 more" {
		t.Errorf("ownerOf = %q", got)
	}
}
