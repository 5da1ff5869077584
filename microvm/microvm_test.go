package microvm

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/workflow"
)

// The vm backend runs qemu (the default too); every other hypervisor the
// schema accepts is refused with an error that says what to write instead.
func TestCheckHypervisor(t *testing.T) {
	for _, hv := range []workflow.Hypervisor{"", workflow.DefaultHypervisor, workflow.HypervisorQEMU} {
		if err := CheckHypervisor(hv); err != nil {
			t.Errorf("CheckHypervisor(%q) = %v, want nil", hv, err)
		}
	}
	for _, hv := range []workflow.Hypervisor{workflow.HypervisorCloudHypervisor, workflow.HypervisorFirecracker, "bhyve"} {
		err := CheckHypervisor(hv)
		if !errors.Is(err, ErrHypervisor) {
			t.Fatalf("CheckHypervisor(%q) = %v, want ErrHypervisor", hv, err)
		}
		for _, want := range []string{`"` + string(hv) + `"`, "runs qemu only", "set hypervisor: qemu"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("CheckHypervisor(%q) = %q: does not say %q", hv, err, want)
			}
		}
	}
}
