package namespace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/runnertest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// rootBackend is a backend whose dirs the test can inspect afterwards.
func rootBackend(t *testing.T) (*Backend, Options) {
	t.Helper()
	testtier.Root(t)
	opts := Options{StateDir: t.TempDir(), JailDir: t.TempDir()}
	return New(opts), opts
}

// assertClean fails when anything of spec's step is left on the host: its
// netns, its cgroup in any hierarchy, a mount, a jail dir or a state file.
func assertClean(t *testing.T, opts Options, spec vmrunner.StepSpec) {
	t.Helper()
	name := hoststate.NetnsName(spec.RunID, spec.Step.Name)
	if _, err := os.Lstat(filepath.Join(netns.RunDir, name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netns %s left behind (%v)", name, err)
	}
	run := filepath.Dir(hoststate.CgroupPath(spec.RunID, spec.Step.Name))
	hier, _ := filepath.Glob(filepath.Join(cgroup.Mountpoint, "*"))
	hier = append(hier, cgroup.Mountpoint)
	for _, h := range hier {
		if _, err := os.Lstat(filepath.Join(h, run)); err == nil {
			t.Errorf("cgroup %s left behind in %s", run, h)
		}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(mi), "\n") {
		if strings.Contains(l, name) || strings.Contains(l, opts.JailDir) {
			t.Errorf("mount left behind: %s", l)
		}
	}
	for _, d := range []string{opts.JailDir, opts.StateDir} {
		if ents, _ := os.ReadDir(d); len(ents) > 0 {
			t.Errorf("%s not empty: %v", d, ents)
		}
	}
}

func TestOOM(t *testing.T) {
	b, opts := rootBackend(t)
	spec := suiteOpts.Spec(t, "hog", runnertest.Sh("dd if=/dev/zero of=/dev/null bs=256M count=1; echo survived"))
	spec.Step.Resources.Memory = 64 << 20
	res := runnertest.RunStep(t, b, spec)
	t.Logf("status %s, detail %q, usage %+v", res.Status, res.Detail, res.Usage)
	if res.Status != vmrunner.StatusOOM || res.Usage.OOMKills < 1 {
		t.Fatalf("status %q, usage %+v, want oom with at least one OOM kill", res.Status, res.Usage)
	}
	if res.Usage.PeakMemoryBytes > 64<<20 {
		t.Errorf("peak memory %d above the 64 MiB limit", res.Usage.PeakMemoryBytes)
	}
	if !strings.Contains(res.Detail, "OOM") {
		t.Errorf("detail %q does not name the OOM", res.Detail)
	}
	assertClean(t, opts, spec)
}

// TestForkBombHeld: a fork bomb is held at the step's pids limit, the step
// ends, and the job's own shell goes on beside it. The shell forks once,
// for a subshell that starts the bomb: dash forks every element of a
// background pipeline from the shell itself, so "f | f &" run by the job's
// own shell races its second fork against the first element's children.
// The shell then waits with a builtin loop, not sleep: any fork competes
// with the bomb for the same pids and may rightly fail while the bomb
// holds them all.
func TestForkBombHeld(t *testing.T) {
	b, opts := rootBackend(t)
	spec := suiteOpts.Spec(t, "bomb", runnertest.Sh("(f() { f | f & }; f) & i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; echo still-here"))
	spec.Step.Resources.PIDs = 32
	spec.Step.Resources.TimeoutMS = 10_000
	res := runnertest.RunStep(t, b, spec)
	limit := int64(32 + InitPIDs)
	t.Logf("status %s, detail %q, result %+v, usage %+v", res.Status, res.Detail, res.Result, res.Usage)
	if res.Usage.PidsPeak < 10 || res.Usage.PidsPeak > limit {
		t.Errorf("pids peak %d, want the bomb to reach the limit %d and stay there", res.Usage.PidsPeak, limit)
	}
	if res.Status == vmrunner.StatusTimeout {
		t.Errorf("the bomb held the step until its timeout: %+v", res)
	}
	if !strings.Contains(runnertest.ReadLog(t, spec, guest.StdoutFile), "still-here") {
		t.Errorf("the job's own shell could not go on next to the held bomb; stderr %q", runnertest.ReadLog(t, spec, guest.StderrFile))
	}
	assertClean(t, opts, spec)
}

func TestCanaryUnderRoot(t *testing.T) {
	b, opts := rootBackend(t)
	dir, err := os.MkdirTemp("/root", "asb-canary-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	secret := "canary-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	canary := filepath.Join(dir, "secret")
	if err := os.WriteFile(canary, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := suiteOpts.Spec(t, "snoop", runnertest.Sh(fmt.Sprintf("cat %s; ls -a /root; cat /proc/1/root%s", canary, canary)))
	res := runnertest.RunStep(t, b, spec)
	out := runnertest.ReadLog(t, spec, guest.StdoutFile) + runnertest.ReadLog(t, spec, guest.StderrFile)
	if strings.Contains(out, secret) {
		t.Fatalf("the job read the canary %s:\n%s", canary, out)
	}
	if res.Status != vmrunner.StatusFailed {
		t.Errorf("status %q, want failed (cat must fail)", res.Status)
	}
	assertClean(t, opts, spec)
}

func TestHostProcessesInvisible(t *testing.T) {
	b, opts := rootBackend(t)
	spec := suiteOpts.Spec(t, "ps", runnertest.Sh(`for p in /proc/[0-9]*; do echo "${p#/proc/} $(tr '\0' ' ' < $p/cmdline)"; done`))
	res := runnertest.RunStep(t, b, spec)
	if res.Status != vmrunner.StatusSucceeded {
		t.Fatalf("result %+v; stderr %q", res, runnertest.ReadLog(t, spec, guest.StderrFile))
	}
	out := runnertest.ReadLog(t, spec, guest.StdoutFile)
	t.Logf("processes in the jail:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) > 4 {
		t.Errorf("the job sees %d processes, want only the jail's (init, sh, a subshell):\n%s", len(lines), out)
	}
	if !strings.HasPrefix(lines[0], "1 agentsandbox-init "+"__agentsandbox_init") {
		t.Errorf("pid 1 in the jail is %q, want the jail's init", lines[0])
	}
	if strings.Contains(out, os.Args[0]) {
		t.Errorf("the test process is visible from the jail:\n%s", out)
	}
	assertClean(t, opts, spec)
}

func TestCancelLeavesNothing(t *testing.T) {
	b, opts := rootBackend(t)
	spec := suiteOpts.Spec(t, "interrupted", runnertest.Sh("echo running-now; sleep 60 & sleep 60; wait"))
	runnertest.WriteJob(t, spec)
	console := runnertest.NewConsole("running-now")
	spec.Console = console
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := vmrunner.RunStep(ctx, b, spec)
		errc <- err
	}()
	select {
	case <-console.Seen():
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not start")
	}
	// Everything exists while it runs...
	name := hoststate.NetnsName(spec.RunID, spec.Step.Name)
	if _, err := os.Lstat(filepath.Join(netns.RunDir, name)); err != nil {
		t.Errorf("netns missing while the step runs: %v", err)
	}
	if ents, _ := os.ReadDir(opts.StateDir); len(ents) != 1 {
		t.Errorf("state dir holds %v while the step runs, want one state file", ents)
	}
	cancel() // what SIGINT does to apply's context
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
	// ...and nothing after.
	assertClean(t, opts, spec)
}

func TestSetupErrorCleansUp(t *testing.T) {
	b, opts := rootBackend(t)
	spec := suiteOpts.Spec(t, "badroot", runnertest.Sh("true"))
	spec.ClosurePaths = []string{"/nix/store/00000000000000000000000000000000-missing"}
	_, err := vmrunner.RunStep(context.Background(), b, spec)
	if err == nil || !strings.Contains(err.Error(), "jail setup: bind") {
		t.Fatalf("Run: %v, want a jail setup error about the bind", err)
	}
	assertClean(t, opts, spec)
}

func TestGCAfterKill(t *testing.T) {
	testtier.Root(t)
	stateDir, jailDir := t.TempDir(), t.TempDir()
	runID := runnertest.RunID(t)
	name := hoststate.NetnsName(runID, "killed")
	ns, err := netns.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	ns.Close()
	cgPath := hoststate.CgroupPath(runID, "killed")
	if _, err := cgroup.New(cgPath, cgroup.Limits{PIDs: 10}); err != nil {
		netns.DeleteByName(name)
		t.Fatal(err)
	}
	dir := filepath.Join(jailDir, name)
	os.Mkdir(dir, 0o700)
	st := hoststate.State{RunID: runID, Step: "killed", PID: deadPID(t), Netns: []string{name}, Cgroups: []string{cgPath}, Dirs: []string{dir}}
	if err := hoststate.Write(stateDir, st); err != nil {
		t.Fatal(err)
	}
	removed, err := hoststate.GC(stateDir, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"cgroup " + cgPath, "netns " + name, "dir " + dir, "state " + filepath.Join(stateDir, st.FileName())}
	if !reflect.DeepEqual(removed, want) {
		t.Errorf("removed %q, want %q", removed, want)
	}
	spec := vmrunner.StepSpec{RunID: runID, Step: workflow.Step{Name: "killed"}}
	assertClean(t, Options{StateDir: stateDir, JailDir: jailDir}, spec)
}

func deadPID(t *testing.T) int {
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	return p.Pid
}
