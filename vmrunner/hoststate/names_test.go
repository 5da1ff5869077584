package hoststate

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestNames pins every name a step gets on the host. The expected values
// are what netns.Name, vmrunner.CgroupPath and the state file's name gave
// before they moved here: names of existing runs must not change, or gc
// and the state files of running applies would disagree. The one change
// is a state file of a non-ASCII name, now escaped per byte (it was per
// code point, where "☃" and "&03" met).
func TestNames(t *testing.T) {
	long := strings.Repeat("x", 60)
	cases := []struct{ run, step, netns, cgroup, file string }{
		{"0123456789abcdef", "build", "asb-01234567-build", "/agentsandbox/0123456789abcdef/build", "state-0123456789abcdef-build.json"},
		{"0123456789abcdef", "test_1.a", "asb-01234567-test_1.a", "/agentsandbox/0123456789abcdef/test_1_a", "state-0123456789abcdef-test_1.a.json"},
		{"0123456789abcdef", "Build", "asb-01234567-build-bdd254", "/agentsandbox/0123456789abcdef/Build", "state-0123456789abcdef-Build.json"},
		{"0123456789abcdef", "a/b", "asb-01234567-a-b-c14cdd", "/agentsandbox/0123456789abcdef/a_b", "state-0123456789abcdef-a%2fb.json"},
		{"0123456789abcdef", "..", "asb-01234567-..", "/agentsandbox/0123456789abcdef/__", "state-0123456789abcdef-...json"},
		{"0123456789abcdef", ".", "asb-01234567-.", "/agentsandbox/0123456789abcdef/_", "state-0123456789abcdef-..json"},
		{"0123456789abcdef", "", "asb-01234567-e3b0c4", "/agentsandbox/0123456789abcdef/_", "state-0123456789abcdef-.json"},
		{"0123456789abcdef", "" + long + "", "asb-01234567-xxxxxxxxxxxxxxxxxxxx-42f2d9", "/agentsandbox/0123456789abcdef/" + long + "", "state-0123456789abcdef-" + long + ".json"},
		{"0123456789abcdef", "a.b", "asb-01234567-a.b", "/agentsandbox/0123456789abcdef/a_b", "state-0123456789abcdef-a.b.json"},
		{"0123456789abcdef", "a b", "asb-01234567-a-b-c8687a", "/agentsandbox/0123456789abcdef/a_b", "state-0123456789abcdef-a%20b.json"},
		{"0123456789abcdef", "s/workspace", "asb-01234567-s-workspace-a885f3", "/agentsandbox/0123456789abcdef/s_workspace", "state-0123456789abcdef-s%2fworkspace.json"},
		{"0123456789abcdef", "é☃", "asb-01234567-85336d", "/agentsandbox/0123456789abcdef/__", "state-0123456789abcdef-%c3%a9%e2%98%83.json"},
		{"0123456789abcdef", "%2f", "asb-01234567--2f-1f2dc6", "/agentsandbox/0123456789abcdef/_2f", "state-0123456789abcdef-%252f.json"},
		{"", "build", "asb-run-build", "/agentsandbox/_/build", "state--build.json"},
		{"", "a/b", "asb-run-a-b-c14cdd", "/agentsandbox/_/a_b", "state--a%2fb.json"},
		{"", "", "asb-run-e3b0c4", "/agentsandbox/_/_", "state--.json"},
		{"run/1", "build", "asb-run-1-build", "/agentsandbox/run_1/build", "state-run%2f1-build.json"},
		{"run/1", "a/b", "asb-run-1-a-b-c14cdd", "/agentsandbox/run_1/a_b", "state-run%2f1-a%2fb.json"},
		{"run/1", "", "asb-run-1-e3b0c4", "/agentsandbox/run_1/_", "state-run%2f1-.json"},
		{"R.1", "build", "asb-r.1-build", "/agentsandbox/R_1/build", "state-R.1-build.json"},
		{"R.1", "a/b", "asb-r.1-a-b-c14cdd", "/agentsandbox/R_1/a_b", "state-R.1-a%2fb.json"},
		{"R.1", "", "asb-r.1-e3b0c4", "/agentsandbox/R_1/_", "state-R.1-.json"},
		{"abc", "test_1.a", "asb-abc-test_1.a", "/agentsandbox/abc/test_1_a", "state-abc-test_1.a.json"},
		{"01HX", "build/x y", "asb-01hx-build-x-y-09003d", "/agentsandbox/01HX/build_x_y", "state-01HX-build%2fx%20y.json"},
		{"r", "..", "asb-r-..", "/agentsandbox/r/__", "state-r-...json"},
		{"0123456789abcdef", "fetch-2", "asb-01234567-fetch-2", "/agentsandbox/0123456789abcdef/fetch-2", "state-0123456789abcdef-fetch-2.json"},
		{"0123456789abcdef", QuotaStep("fetch-2"), "asb-01234567-fetch-2-workspace-dc0244", "/agentsandbox/0123456789abcdef/fetch-2_workspace", "state-0123456789abcdef-fetch-2%2fworkspace.json"},
		{"0123456789abcdef", "a\xffb", "asb-01234567-a-b-01ce02", "/agentsandbox/0123456789abcdef/a_b", "state-0123456789abcdef-a%ffb.json"},
	}
	for _, c := range cases {
		if got := NetnsName(c.run, c.step); got != c.netns {
			t.Errorf("NetnsName(%q, %q) = %q, want %q", c.run, c.step, got, c.netns)
		}
		if got := CgroupPath(c.run, c.step); got != c.cgroup {
			t.Errorf("CgroupPath(%q, %q) = %q, want %q", c.run, c.step, got, c.cgroup)
		}
		if got := StateFileName(c.run, c.step); got != c.file {
			t.Errorf("StateFileName(%q, %q) = %q, want %q", c.run, c.step, got, c.file)
		}
		if got := (State{RunID: c.run, Step: c.step}).FileName(); got != c.file {
			t.Errorf("State.FileName = %q, want %q", got, c.file)
		}
		n := NetnsName(c.run, c.step)
		if len(n) > MaxNetnsName || strings.ContainsAny(n, "/\x00") || !strings.HasPrefix(n, "asb-") {
			t.Errorf("NetnsName(%q, %q) = %q: not a short plain file name with the prefix", c.run, c.step, n)
		}
		cg := CgroupPath(c.run, c.step)
		if filepath.Clean(cg) != cg || filepath.Dir(filepath.Dir(cg)) != CgroupRoot || filepath.Dir(cg) != RunCgroup(c.run) {
			t.Errorf("CgroupPath(%q, %q) = %q: not two clean components below %s", c.run, c.step, cg, CgroupRoot)
		}
		if f := StateFileName(c.run, c.step); strings.ContainsAny(f, "/\x00") {
			t.Errorf("StateFileName(%q, %q) = %q holds a separator", c.run, c.step, f)
		}
		if got, want := JailRoot("/j", c.run, c.step), "/j/"+c.netns; got != want {
			t.Errorf("JailRoot = %q, want %q", got, want)
		}
		if got, want := VMWorkDir("/w", c.run, c.step), "/w/"+c.netns; got != want {
			t.Errorf("VMWorkDir = %q, want %q", got, want)
		}
		if got, want := VMRootDir("/w", c.run, c.step), "/w/"+c.netns+".root"; got != want {
			t.Errorf("VMRootDir = %q, want %q", got, want)
		}
	}
	if NetnsName("r", long+"1") == NetnsName("r", long+"2") {
		t.Error("long step names that differ only at the end share a netns name")
	}
	if StateFileName("r", "☃") == StateFileName("r", "&03") {
		t.Error("distinct step names share a state file")
	}
}
