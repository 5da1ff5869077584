package namespace

import (
	"context"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/workflow"
)

func TestLimits(t *testing.T) {
	noDevice := func(p string) (cgroup.Device, error) {
		t.Errorf("deviceOf(%q) called for a step without IO rates", p)
		return cgroup.Device{}, errors.New("unexpected")
	}
	got, err := Limits(workflow.Resources{VCPU: 2, Memory: 1 << 30, PIDs: 100, Disk: 5, TimeoutMS: 9}, "/ws", noDevice)
	want := cgroup.Limits{MemoryBytes: 1 << 30, PIDs: 100 + InitPIDs, VCPU: 2}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Limits = %+v, %v; want %+v", got, err, want)
	}
	if l, err := Limits(workflow.Resources{}, "/ws", noDevice); err != nil || l.PIDs != 0 {
		t.Errorf("no pids limit became %d (%v)", l.PIDs, err)
	}

	vda := func(p string) (cgroup.Device, error) {
		if p != "/ws" {
			t.Errorf("deviceOf(%q), want the workspace /ws", p)
		}
		return cgroup.Device{Major: 253, Minor: 0}, nil
	}
	got, err = Limits(workflow.Resources{Memory: 1 << 30, IOWriteBps: 1 << 20}, "/ws", vda)
	want = cgroup.Limits{MemoryBytes: 1 << 30, IOWriteBps: 1 << 20, IODevices: []cgroup.Device{{Major: 253, Minor: 0}}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("write-throttled Limits = %+v, %v; want %+v", got, err, want)
	}
	got, err = Limits(workflow.Resources{IOReadBps: 5e6}, "/ws", vda)
	want = cgroup.Limits{IOReadBps: 5e6, IODevices: []cgroup.Device{{Major: 253, Minor: 0}}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("read-throttled Limits = %+v, %v; want %+v", got, err, want)
	}

	tmpfs := errors.New("block device of /ws: 0:45 is not a block device")
	_, err = Limits(workflow.Resources{IOWriteBps: 1 << 20}, "/ws", func(string) (cgroup.Device, error) { return cgroup.Device{}, tmpfs })
	if !errors.Is(err, tmpfs) {
		t.Fatalf("Limits on a workspace without a disk: %v, want the device error wrapped", err)
	}
	for _, part := range []string{"/ws", "ioWrite 1MiB/s", "ioRead unlimited", "block devices only", "remove the step's ioRead and ioWrite"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not say %q", err, part)
		}
	}
}

func TestHostTimeout(t *testing.T) {
	for _, tc := range []struct {
		step, job, want int64
	}{
		{500, 0, 500},
		{500, 100, 100},
		{500, 60_000, 500},
		{0, 700, 700},
		{0, 0, 0},
	} {
		spec := vmrunner.StepSpec{Step: workflow.Step{Resources: workflow.Resources{TimeoutMS: tc.step}}, Job: guest.Job{TimeoutMS: tc.job}}
		if got := hostTimeoutMS(spec); got != tc.want {
			t.Errorf("step %d ms, job %d ms: host deadline %d ms, want %d", tc.step, tc.job, got, tc.want)
		}
	}
}

func TestRefusals(t *testing.T) {
	base := vmrunner.StepSpec{RunID: "r", Step: workflow.Step{Name: "s"}, Workspace: "/w", ControlDir: "/c"}
	pkgs := base
	pkgs.Step.Packages = []string{"hello"}
	for _, tc := range []struct {
		name string
		spec vmrunner.StepSpec
		want error
	}{{"packages without nix", pkgs, ErrPackagesWithoutNix}} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(Options{StateDir: t.TempDir(), JailDir: t.TempDir()})
			_, err := vmrunner.RunStep(context.Background(), b, tc.spec)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Run: %v, want %v", err, tc.want)
			}
		})
	}
}

// TestIORateWithoutDisk: a step with an IO rate whose workspace has no
// block device under it (here /proc) fails before anything is created.
func TestIORateWithoutDisk(t *testing.T) {
	spec := vmrunner.StepSpec{RunID: "r", Step: workflow.Step{Name: "s"}, Workspace: "/proc", ControlDir: "/c"}
	spec.Step.Resources.IOWriteBps = 1 << 20
	opts := Options{StateDir: t.TempDir(), JailDir: t.TempDir()}
	_, err := vmrunner.RunStep(context.Background(), New(opts), spec)
	if err == nil || !strings.Contains(err.Error(), "throttle disk IO of the workspace /proc") {
		t.Fatalf("Run: %v, want a throttle error naming the workspace", err)
	}
	for _, d := range []string{opts.StateDir, opts.JailDir} {
		if ents, _ := os.ReadDir(d); len(ents) > 0 {
			t.Errorf("%s not empty after a refused step: %v", d, ents)
		}
	}
}
