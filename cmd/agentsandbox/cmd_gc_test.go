package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
)

// TestGCAfterSIGKILLWithStateDir kills an apply that uses its own state
// directory with SIGKILL while its step runs; `gc --state-dir` must then
// leave nothing: no netns, cgroup, mount, state file or run directory.
func TestGCAfterSIGKILLWithStateDir(t *testing.T) {
	testtier.Root(t)
	dir := t.TempDir()
	bin := buildCLI(t, dir)
	wf := filepath.Join(dir, "killed.yaml")
	os.WriteFile(wf, []byte("apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: killed\nsteps:\n  - name: gckilled\n    run: echo job-running; sleep 300\n    network: {allow: [\"api.example.test:443\"]}\n    resources: {timeout: 10m, bandwidth: 8Mbit}\n"), 0o644)
	state := filepath.Join(dir, "custom-state")
	a := startApply(t, bin, "apply", "--isolation", "namespace", "--state-dir", state, wf)
	a.waitFor(t, "[gckilled] job-running", time.Minute)
	run := runningRunID(t, state)
	a.cmd.Process.Signal(syscall.SIGKILL)
	a.wait()

	code, out, stderr := execute(t, "gc", "--state-dir", state)
	if code != ExitOK {
		t.Fatalf("gc: exit %d\n%s%s", code, out, stderr)
	}
	if !strings.Contains(out, filepath.Join(state, "runs", run)) {
		t.Errorf("gc did not report removing the run directory:\n%s", out)
	}
	assertStepLeftNothing(t, run, "gckilled", state)
	if pids := stepProcesses(t, "sleep", hoststate.CgroupPath(run, "gckilled")); len(pids) > 0 {
		t.Errorf("job processes left: %v", pids)
	}
}
