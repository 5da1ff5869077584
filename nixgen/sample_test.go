package nixgen

import "github.com/agentsandbox/agentsandbox/workflow"

// sampleWorkflow is a defaulted workflow with one step per hypervisor, one
// with network and one without, built in Go so these tests do not depend on
// the YAML parser.
func sampleWorkflow() *workflow.Workflow {
	res := workflow.Resources{VCPU: 2, Memory: 2 << 30, PIDs: 512, Disk: 1 << 30, TimeoutMS: 600000}
	return &workflow.Workflow{
		APIVersion: workflow.APIVersion,
		Kind:       workflow.Kind,
		Name:       "sample",
		Nixpkgs: &workflow.Nixpkgs{
			Ref:     "github:NixOS/nixpkgs/0123456789abcdef0123456789abcdef01234567",
			Rev:     "0123456789abcdef0123456789abcdef01234567",
			NarHash: "sha256-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
		},
		Steps: []workflow.Step{
			{
				Name: "fetch", Run: "curl -fsSLO https://pypi.org/simple/\n",
				Packages:  []string{"cacert", "curl"},
				Env:       map[string]string{"LANG": "C.UTF-8"},
				Resources: workflow.Resources{VCPU: 1, Memory: 512 << 20, PIDs: 128, Disk: 256 << 20},
				Network:   workflow.Network{Allow: []string{"10.0.0.0/8:5432", "[2001:db8::/32]:443", "pypi.org:443"}},
				Isolation: workflow.IsolationAuto, Hypervisor: workflow.HypervisorQEMU,
			},
			{
				Name: "train", Run: "python3 train.py\n",
				Packages:  []string{"python3", "python3Packages.numpy"},
				Needs:     []string{"fetch"},
				Resources: res,
				Isolation: workflow.IsolationVM, Hypervisor: workflow.HypervisorCloudHypervisor,
			},
			{
				Name: "report", Run: "cat out/*.txt\n",
				Needs:     []string{"train"},
				Resources: workflow.Resources{VCPU: 1, Memory: 256 << 20, PIDs: 64, Disk: 64 << 20},
				Network:   workflow.Network{Allow: []string{"*"}},
				Isolation: workflow.IsolationVM, Hypervisor: workflow.HypervisorFirecracker,
			},
		},
	}
}
