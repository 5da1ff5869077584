package namespace

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/workflow"
)

func TestLimits(t *testing.T) {
	got := Limits(workflow.Resources{VCPU: 2, Memory: 1 << 30, PIDs: 100, Disk: 5, TimeoutMS: 9})
	want := cgroup.Limits{MemoryBytes: 1 << 30, PIDs: 100 + InitPIDs, VCPU: 2}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Limits = %+v, want %+v", got, want)
	}
	if l := Limits(workflow.Resources{}); l.PIDs != 0 {
		t.Errorf("no pids limit became %d", l.PIDs)
	}
}

func TestJob(t *testing.T) {
	spec := vmrunner.StepSpec{
		Step:    workflow.Step{Resources: workflow.Resources{TimeoutMS: 500}},
		Job:     guest.Job{Env: []string{"A=1", "Z=2"}},
		EnvPath: "/nix/store/aaa-env",
	}
	j := job(spec)
	if j.TimeoutMS != 500 || !reflect.DeepEqual(j.Env, []string{"A=1", "PATH=/nix/store/aaa-env/bin", "Z=2"}) {
		t.Errorf("job = %+v", j)
	}
	if !reflect.DeepEqual(spec.Job.Env, []string{"A=1", "Z=2"}) {
		t.Errorf("job changed the spec's env: %v", spec.Job.Env)
	}
	spec.Job.Env = []string{"PATH=/mine"}
	spec.Job.TimeoutMS = 100
	if j := job(spec); !reflect.DeepEqual(j.Env, []string{"PATH=/mine"}) || j.TimeoutMS != 100 {
		t.Errorf("job with its own PATH and shorter timeout = %+v", j)
	}
	spec.Job.TimeoutMS = 60_000
	if j := job(spec); j.TimeoutMS != 500 {
		t.Errorf("a job timeout longer than the step's became %d, want the step's 500", j.TimeoutMS)
	}
}

func TestRefusals(t *testing.T) {
	base := vmrunner.StepSpec{RunID: "r", Step: workflow.Step{Name: "s"}, Workspace: "/w", ControlDir: "/c"}
	egress := base
	egress.Step.Network.Allow = []string{"example.org:443"}
	pkgs := base
	pkgs.Step.Packages = []string{"hello"}
	for _, tc := range []struct {
		name string
		spec vmrunner.StepSpec
		want error
	}{{"egress", egress, vmrunner.ErrEgressUnsupported}, {"packages without nix", pkgs, ErrPackagesWithoutNix}} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(Options{StateDir: t.TempDir(), JailDir: t.TempDir()})
			_, err := b.Run(context.Background(), tc.spec)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Run: %v, want %v", err, tc.want)
			}
		})
	}
}
