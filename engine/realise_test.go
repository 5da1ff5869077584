package engine

import (
	"testing"

	"github.com/agentsandbox/agentsandbox/workflow"
)

func TestRealiseAttrs(t *testing.T) {
	vmQ := workflow.Step{Name: "train", Isolation: workflow.IsolationVM, Hypervisor: workflow.HypervisorQEMU}
	vmCH := workflow.Step{Name: "train", Isolation: workflow.IsolationVM, Hypervisor: workflow.HypervisorCloudHypervisor}
	ns := workflow.Step{Name: "train", Isolation: workflow.IsolationNamespace, Packages: []string{"python3"}}
	cases := []struct {
		kvm    bool
		step   workflow.Step
		attr   string
		runner bool
	}{
		{true, vmQ, "packages.x86_64-linux.train", true},
		{false, vmQ, "legacyPackages.x86_64-linux.tcgRunners.train", true},
		{false, vmCH, "packages.x86_64-linux.train", true}, // no emulation: the backend refuses it with a clear error
		{false, ns, "legacyPackages.x86_64-linux.stepEnvs.train", false},
	}
	for _, c := range cases {
		n := &NixRealiser{KVM: c.kvm}
		attr, runner := n.attrFor(c.step)
		if attr != c.attr || runner != c.runner {
			t.Errorf("kvm=%v %s/%s: got %s %v, want %s %v", c.kvm, c.step.Isolation, c.step.Hypervisor, attr, runner, c.attr, c.runner)
		}
	}
}
