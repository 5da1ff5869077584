package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const firecracker = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: hv
nixpkgs: github:NixOS/nixpkgs/8f3e1f807051e32d8c95cd12b9b421623850a34d
steps:
  - name: boot
    isolation: vm
    hypervisor: %HV%
    run: "true"
    resources: {timeout: 1m}
`

// TestApplyRefusesUnsupportedHypervisor: the workflow schema accepts
// cloud-hypervisor and firecracker, which the vm backend does not run;
// apply refuses such a step at once, naming the step and what to write
// instead, before generating or building its runner and without a
// record, whatever this host has (Nix, KVM or neither).
func TestApplyRefusesUnsupportedHypervisor(t *testing.T) {
	for _, hv := range []string{"firecracker", "cloud-hypervisor"} {
		p := writeWorkflow(t, t.TempDir(), strings.Replace(firecracker, "%HV%", hv, 1))
		if code, _, stderr := execute(t, "validate", p); code != ExitOK {
			t.Fatalf("%s: validate: exit %d, want %d (the schema accepts it)\n%s", hv, code, ExitOK, stderr)
		}
		state := filepath.Join(t.TempDir(), "state")
		code, stdout, stderr := execute(t, "apply", "--state-dir", state, p)
		if code != ExitInfra {
			t.Errorf("%s: apply: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", hv, code, ExitInfra, stdout, stderr)
		}
		for _, want := range []string{`step "boot": hypervisor "` + hv + `"`, "runs qemu only", "set hypervisor: qemu"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%s: apply's error does not say %q:\n%s", hv, want, stderr)
			}
		}
		for _, dir := range []string{"records", "flakes"} {
			if ents, _ := os.ReadDir(filepath.Join(state, dir)); len(ents) != 0 {
				t.Errorf("%s: a refused run left %s/%s", hv, dir, ents[0].Name())
			}
		}
	}
}
