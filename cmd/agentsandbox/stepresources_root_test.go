package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/vmrunner/wsquota"
)

// stepHost names one step of one apply on this host: what the resources
// below look for. Other tests, of this package or of another suite on the
// same host, may run at the same time: each looks for this run's names
// only.
type stepHost struct {
	run, step string
	state     string // the apply's --state-dir; its run directories are in state/runs
	// netnsIno is the inode of the step's network namespace, seen while
	// the step ran (0 if it was not), so that a namespace whose name is
	// gone but which a process still holds is found too.
	netnsIno uint64
}

// stepResource is one thing a step holds on the host, who owns it (creates
// it and releases it in the one teardown order, docs/isolation.md "Who
// owns what on the host"), and how to find it: find lists what of it is
// on the host now.
type stepResource struct {
	what, owner string
	find        func(t *testing.T, h stepHost) []string
}

// stepResources are all the resources a namespace step with egress and a
// workspace quota acquires on the host. While its job runs each must be
// found (or the check after proves nothing); once the apply ended (or gc
// ran after a killed one) none may be.
var stepResources = []stepResource{
	{"state file", "vmrunner/sandbox (Sandbox.Cleanup; Workspaces for the workspace's)", func(t *testing.T, h stepHost) []string {
		files, err := hoststate.Read(hoststate.DefaultDir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range files {
			if f.State.RunID == h.run {
				out = append(out, f.Path+" ("+f.State.Step+")")
			}
		}
		return out
	}},
	{"network namespace", "vmrunner/sandbox (Sandbox.Create, Cleanup)", func(t *testing.T, h stepHost) []string {
		nss, _ := netns.List(netns.Prefix)
		var out []string
		for _, n := range nss {
			if n == hoststate.NetnsName(h.run, h.step) {
				out = append(out, n)
			}
		}
		for _, p := range netnsHolders(h.netnsIno) {
			out = append(out, "held by process "+p)
		}
		return out
	}},
	{"egress room (listeners in the namespace)", "vmrunner/sandbox's netns, opened and closed by the backend (vmrunner.Egress)", func(t *testing.T, h stepHost) []string {
		ns := filepath.Join(netns.RunDir, hoststate.NetnsName(h.run, h.step))
		if _, err := os.Stat(ns); err != nil {
			holders := netnsHolders(h.netnsIno)
			if len(holders) == 0 {
				return nil
			}
			ns = "/proc/" + holders[0] + "/ns/net"
		}
		out, err := exec.Command("nsenter", "--net="+ns, "cat", "/proc/net/tcp", "/proc/net/tcp6").Output()
		if err != nil {
			return []string{fmt.Sprintf("%s: cannot list its sockets: %v", ns, err)}
		}
		var listening []string
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 3 && f[3] == "0A" { // TCP_LISTEN
				listening = append(listening, "listener "+f[1])
			}
		}
		return listening
	}},
	{"cgroup", "vmrunner/sandbox (Sandbox.Create, Cleanup)", func(t *testing.T, h stepHost) []string {
		cgs, _ := cgroup.List(hoststate.CgroupRoot)
		var out []string
		for _, c := range cgs {
			if c == hoststate.CgroupPath(h.run, h.step) {
				out = append(out, c)
			}
		}
		return out
	}},
	{"jail (the job's processes)", "vmrunner/sandbox (Sandbox.Start, Stop, Cleanup)", func(t *testing.T, h stepHost) []string {
		return stepProcesses(t, "", hoststate.CgroupPath(h.run, h.step)) // every process, whatever its command
	}},
	{"jail root", "vmrunner/sandbox (Sandbox.Mkdir, Cleanup)", func(t *testing.T, h stepHost) []string {
		root := hoststate.JailRoot("/run/agentsandbox/jails", h.run, h.step)
		var out []string
		if _, err := os.Lstat(root); err == nil {
			out = append(out, root)
		}
		return append(out, mountsBelow(t, root)...)
	}},
	{"workspace mount", "vmrunner/sandbox (Workspaces.Mount, Release)", func(t *testing.T, h stepHost) []string {
		return mountsBelow(t, filepath.Join(h.state, "runs", h.run))
	}},
	{"loop device", "vmrunner/sandbox (Workspaces.Mount, Release)", func(t *testing.T, h stepHost) []string {
		loops, _ := filepath.Glob("/sys/block/loop*")
		var out []string
		for _, l := range loops {
			if back, _ := wsquota.BackingFile("/dev/" + filepath.Base(l)); strings.HasPrefix(back, filepath.Join(h.state, "runs", h.run)+"/") {
				out = append(out, filepath.Base(l)+" serving "+back)
			}
		}
		return out
	}},
	{"control and workspace directories (the run directory)", "engine (creates it), vmrunner/sandbox (Workspaces.RemoveRunDir)", func(t *testing.T, h stepHost) []string {
		dir := filepath.Join(h.state, "runs", h.run)
		if _, err := os.Lstat(dir); err != nil {
			return nil
		}
		return []string{dir}
	}},
}

// netnsHolders lists the processes whose network namespace has inode ino.
func netnsHolders(ino uint64) []string {
	if ino == 0 {
		return nil
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var out []string
	for _, p := range procs {
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join(p, "ns", "net"), &st) == nil && st.Ino == ino {
			out = append(out, filepath.Base(p))
		}
	}
	return out
}

// mountsBelow lists the mount points at or below dir.
func mountsBelow(t *testing.T, dir string) []string {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(l); len(f) > 4 {
			if p := strings.ReplaceAll(f[4], `\040`, " "); p == dir || strings.HasPrefix(p, dir+"/") {
				out = append(out, p)
			}
		}
	}
	return out
}

// acquired checks that, while the step's job runs, every resource of
// stepResources is on the host, and returns h with the namespace's inode.
func acquired(t *testing.T, h stepHost) stepHost {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(netns.RunDir, hoststate.NetnsName(h.run, h.step)), &st); err == nil {
		h.netnsIno = st.Ino
	}
	for _, r := range stepResources {
		if got := r.find(t, h); len(got) == 0 {
			t.Errorf("while the job runs, no %s of step %s is found on the host: the check that it is released proves nothing", r.what, h.step)
		} else {
			t.Logf("acquired %s: %q", r.what, got)
		}
	}
	return h
}

// assertReleased fails for each resource of stepResources of step h that
// is left on the host, naming its owner; after says by whom it should have
// been released.
func assertReleased(t *testing.T, h stepHost, after string) {
	t.Helper()
	for _, r := range stepResources {
		if got := r.find(t, h); len(got) > 0 {
			t.Errorf("%s: %s of step %s left (its owner: %s): %q", after, r.what, h.step, r.owner, got)
		}
	}
}

// assertStepLeftNothing checks that the step named step of the run run,
// an apply that used the state directory state, left none of
// stepResources.
func assertStepLeftNothing(t *testing.T, run, step, state string) {
	t.Helper()
	assertReleased(t, stepHost{run: run, step: step, state: state}, "after the apply")
}

// TestApplyReleasesStepResources lists what a step acquires on the host
// (stepResources), checks that each is there while the job runs, and that
// each is released by its owner when the step succeeds, when its job
// fails, when apply is interrupted (SIGINT) — apply itself releases
// everything, so gc then finds nothing of the run — and when apply is
// killed (SIGKILL): then its state files are left, and `agentsandbox gc`
// releases everything.
func TestApplyReleasesStepResources(t *testing.T) {
	testtier.Root(t)
	if _, err := wsquota.FindMkfs(); err != nil {
		testtier.Skip(t, "root", err.Error())
	}
	if _, err := os.Stat(wsquota.LoopControl); err != nil {
		testtier.Skip(t, "root", wsquota.ErrNoLoop.Error())
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		testtier.Skip(t, "root", "nsenter not found (apt-get install util-linux): the egress room is read through it")
	}
	bin := buildCLI(t, t.TempDir())
	for _, c := range []struct {
		name, run string
		end       func(a *runningApply)
		wantExit  int
	}{
		{"success", "sleep 3", nil, ExitOK},
		{"failing job", "sleep 3; exit 7", nil, ExitStepFailed},
		{"SIGINT", "sleep 300", func(a *runningApply) { a.cmd.Process.Signal(syscall.SIGINT) }, ExitInfra},
		{"SIGKILL and gc", "sleep 300", func(a *runningApply) { a.cmd.Process.Signal(syscall.SIGKILL) }, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			wf := filepath.Join(dir, "held.yaml")
			os.WriteFile(wf, []byte("apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: held\nsteps:\n  - name: held\n    run: echo job-running; "+c.run+"\n    network: {allow: [\"api.example.test:443\"]}\n    resources: {timeout: 10m, bandwidth: 8Mbit, disk: 32MiB}\n"), 0o644)
			state := filepath.Join(dir, "state")
			a := startApply(t, bin, "apply", "--isolation", "namespace", "--state-dir", state, wf)
			a.waitFor(t, "[held] job-running", time.Minute)
			h := acquired(t, stepHost{run: runningRunID(t, state), step: "held", state: state})
			if c.end != nil {
				c.end(a)
			}
			err := a.wait()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.wantExit {
				t.Errorf("apply: exit %d, want %d\n%s", code, c.wantExit, a.stderrText())
			}
			if c.wantExit >= 0 {
				assertReleased(t, h, "after apply ended")
			} else if left := stepResources[0].find(t, h); len(left) == 0 {
				t.Errorf("after SIGKILL no state file of the run is left: gc would not know what to release")
			}
			gcCode, out, stderr := execute(t, "gc", "--state-dir", state)
			if gcCode != ExitOK {
				t.Fatalf("gc: exit %d\n%s%s", gcCode, out, stderr)
			}
			ranGC := strings.Contains(out, h.run)
			if c.wantExit >= 0 && ranGC {
				t.Errorf("gc removed what the apply should have released:\n%s", out)
			}
			if c.wantExit < 0 && !strings.Contains(out, filepath.Join(state, "runs", h.run)) {
				t.Errorf("gc did not report removing the run directory:\n%s", out)
			}
			assertReleased(t, h, "after gc")
		})
	}
}
