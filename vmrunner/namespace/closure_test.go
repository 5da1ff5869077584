package namespace

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/runnertest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/vmrunner"
)

// busyboxClosure adds a static busybox and an environment whose bin/ links
// to it to the Nix store, and returns the closure and the environment.
func busyboxClosure(t *testing.T) (closure []string, env string) {
	t.Helper()
	testtier.NixBuild(t)
	bb := testtier.Command(t, "nix", "busybox", "Debian's busybox-static")
	if out, err := exec.Command("file", "-L", bb).Output(); err == nil && !strings.Contains(string(out), "statically linked") {
		testtier.Skip(t, "nix", bb+" is not statically linked (install busybox-static)")
	}
	add := func(p string) string {
		out, err := exec.Command("nix-store", "--add", p).CombinedOutput()
		if err != nil {
			t.Fatalf("nix-store --add %s: %v: %s", p, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	tmp := t.TempDir()
	if err := os.Mkdir(filepath.Join(tmp, "busybox"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "busybox", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	bbPath := add(filepath.Join(tmp, "busybox"))
	envDir := filepath.Join(tmp, "asb-test-env")
	if err := os.MkdirAll(filepath.Join(envDir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"sh", "ls", "cat", "echo", "env"} {
		if err := os.Symlink(bbPath+"/busybox", filepath.Join(envDir, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	env = add(envDir)
	return []string{bbPath, env}, env
}

func TestClosureRoot(t *testing.T) {
	testtier.Root(t)
	closure, env := busyboxClosure(t)
	b, opts := rootBackend(t)
	spec := suiteOpts.Spec(t, "nixstep", runnertest.Sh("echo from-closure > out.txt; ls /; ls /nix/store; test -e /usr/bin/tr && echo HOST-USR; echo PATH=$PATH"))
	spec.Job.Env = []string{"PATH=" + env + "/bin"} // as the engine writes it for a step with packages
	spec.Step.Packages = []string{"busybox"}
	spec.ClosurePaths, spec.EnvPath = closure, env
	res := runnertest.RunStep(t, b, spec)
	out := runnertest.ReadLog(t, spec, guest.StdoutFile)
	t.Logf("result %s; stdout:\n%s", res.Status, out)
	if res.Status != vmrunner.StatusSucceeded {
		t.Fatalf("result %+v; stderr %q", res, runnertest.ReadLog(t, spec, guest.StderrFile))
	}
	if strings.Contains(out, "HOST-USR") {
		t.Error("the host's /usr is visible in a closure jail")
	}
	if !strings.Contains(out, "PATH="+env+"/bin\n") {
		t.Errorf("PATH is not the env's bin")
	}
	for _, p := range closure {
		if !strings.Contains(out, filepath.Base(p)) {
			t.Errorf("store path %s not in the jail", p)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(spec.Workspace, "out.txt")); string(got) != "from-closure\n" {
		t.Errorf("out.txt = %q", got)
	}
	assertClean(t, opts, spec)
}
