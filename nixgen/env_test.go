package nixgen

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/workflow"
)

// TestOneSystemForManySteps renders 1,000 steps that differ in everything
// but their environment and wants one NixOS system, one runner, one
// stepEnvs entry and one module.
func TestOneSystemForManySteps(t *testing.T) {
	w := sampleWorkflow()
	base := w.Steps[0]
	w.Steps = nil
	for i := 0; i < 1000; i++ {
		s := base
		s.Name = fmt.Sprintf("step-%d", i)
		s.Run = fmt.Sprintf("echo %d\n", i)
		s.Env = map[string]string{"N": fmt.Sprint(i)}
		s.Resources.TimeoutMS = int64(i+1) * 1000
		s.Resources.PIDs = 64 + i
		s.Resources.Disk = int64(i+1) << 20 // qemu: the disk is the host's business
		s.Resources.Bandwidth = int64(i) * 1000
		if i%2 == 1 {
			s.Isolation = workflow.IsolationVM
			s.Needs = []string{fmt.Sprintf("step-%d", i-1)}
		}
		w.Steps = append(w.Steps, s)
	}
	fs, err := Generate(w, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 3 {
		t.Fatalf("files = %v, want flake.nix, one environment module and tcg.nix", fs.Paths())
	}
	groups, err := Environments(w)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || len(groups[0].Steps) != 1000 {
		t.Fatalf("%d environments, want 1 shared by 1000 steps", len(groups))
	}
	flake, _ := fs.Get("flake.nix")
	name := groups[0].Hash.Name()
	for _, want := range []string{"lib.nixosSystem {", "= microvmSystem ./envs/", "= self.nixosConfigurations.", "pkgs.buildEnv", "extendModules"} {
		if n := strings.Count(string(flake), want); n != 1 {
			t.Errorf("flake.nix has %q %d times, want once", want, n)
		}
	}
	if _, ok := fs.Get("envs/" + name + ".nix"); !ok {
		t.Errorf("no envs/%s.nix in %v", name, fs.Paths())
	}
	for _, f := range fs {
		if strings.Contains(string(f.Data), "step-") {
			t.Errorf("%s names a step", f.Path)
		}
	}
}

// TestEnvironmentIdentity: what changes an environment and what does not.
func TestEnvironmentIdentity(t *testing.T) {
	base := sampleWorkflow().Steps[0]
	hash := func(f func(s *workflow.Step)) EnvHash {
		s := base
		s.Resources = base.Resources
		f(&s)
		e, err := EnvironmentOf(&s)
		if err != nil {
			t.Fatal(err)
		}
		return e.Hash()
	}
	h0 := hash(func(*workflow.Step) {})
	for _, c := range []struct {
		what string
		f    func(s *workflow.Step)
		same bool
	}{
		{"name", func(s *workflow.Step) { s.Name = "other" }, true},
		{"run", func(s *workflow.Step) { s.Run = "true" }, true},
		{"env", func(s *workflow.Step) { s.Env = nil }, true},
		{"timeout", func(s *workflow.Step) { s.Resources.TimeoutMS = 1 }, true},
		{"pids", func(s *workflow.Step) { s.Resources.PIDs = 1 }, true},
		{"disk with 9p", func(s *workflow.Step) { s.Resources.Disk = 8 << 30 }, true},
		{"isolation", func(s *workflow.Step) { s.Isolation = workflow.IsolationNamespace }, true},
		{"memory rounding", func(s *workflow.Step) { s.Resources.Memory = 512<<20 - 1 }, true},
		{"packages", func(s *workflow.Step) { s.Packages = []string{"curl"} }, false},
		{"hypervisor", func(s *workflow.Step) { s.Hypervisor = workflow.HypervisorCloudHypervisor }, false},
		{"vcpu", func(s *workflow.Step) { s.Resources.VCPU = 2 }, false},
		{"memory", func(s *workflow.Step) { s.Resources.Memory = 1 << 30 }, false},
		{"allow", func(s *workflow.Step) { s.Network.Allow = []string{"*"} }, false},
		{"no network", func(s *workflow.Step) { s.Network.Allow = nil }, false},
	} {
		if got := hash(c.f) == h0; got != c.same {
			t.Errorf("%s: same environment = %v, want %v", c.what, got, c.same)
		}
	}
	fc := func(disk int64) EnvHash {
		return hash(func(s *workflow.Step) { s.Hypervisor = workflow.HypervisorFirecracker; s.Resources.Disk = disk })
	}
	if fc(1<<30) == fc(2<<30) {
		t.Error("firecracker: the workspace volume's size is part of the environment")
	}
	if fc(1<<20) != fc(2<<20) {
		t.Error("firecracker: sizes below the minimum volume are the same environment")
	}
	if got := h0.String(); !strings.HasPrefix(got, "sha256:") || len(got) != 71 {
		t.Errorf("String = %q", got)
	}
}
