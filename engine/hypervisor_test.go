package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/fakebackend"
	"github.com/agentsandbox/agentsandbox/microvm"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// TestUnsupportedHypervisorRefusedBeforeBuild: a vm step asking for a
// hypervisor the schema accepts but the vm backend does not run is
// refused with the run, before Nix builds its runner and before any step
// starts; the same step with qemu is not refused, and neither is a
// namespace step (the hypervisor is a vm step's only).
func TestUnsupportedHypervisorRefusedBeforeBuild(t *testing.T) {
	for _, hv := range []workflow.Hypervisor{workflow.HypervisorFirecracker, workflow.HypervisorCloudHypervisor} {
		text := strings.Replace(pipelineYAML, "  - name: count\n", "  - name: count\n    isolation: vm\n    hypervisor: "+string(hv)+"\n", 1)
		text = strings.Replace(text, "name: pipeline\n", "name: pipeline\nnixpkgs: github:NixOS/nixpkgs/8f3e1f807051e32d8c95cd12b9b421623850a34d\n", 1)
		f := newFixture(t, text)
		b := fakebackend.New()
		o := f.options(t, b, nil)
		o.Host.Nix = true
		o.Backends[workflow.IsolationVM] = b
		built := 0
		o.Realise = func(ctx context.Context, steps []workflow.Step) (map[string]Realised, error) {
			built++
			return nil, errors.New("no Nix in this test")
		}
		_, err := Run(context.Background(), f.w, o)
		if !errors.Is(err, microvm.ErrHypervisor) {
			t.Fatalf("%s: Run = %v, want microvm.ErrHypervisor", hv, err)
		}
		if !strings.Contains(err.Error(), `step "count": hypervisor "`+string(hv)+`"`) || !strings.Contains(err.Error(), "set hypervisor: qemu") {
			t.Errorf("%s: the refusal does not name the step and say what to do: %v", hv, err)
		}
		if built != 0 || len(b.Runs()) != 0 {
			t.Errorf("%s: refused after %d builds and %d steps", hv, built, len(b.Runs()))
		}
	}
	steps := []workflow.Step{
		{Name: "q", Isolation: workflow.IsolationVM, Hypervisor: workflow.HypervisorQEMU},
		{Name: "ns", Isolation: workflow.IsolationNamespace, Hypervisor: workflow.HypervisorFirecracker},
	}
	b := fakebackend.New()
	if err := refuse(steps, Options{Backends: map[workflow.Isolation]vmrunner.Backend{workflow.IsolationVM: b, workflow.IsolationNamespace: b}}); err != nil {
		t.Errorf("a qemu vm step and a namespace step: refused: %v", err)
	}
}
