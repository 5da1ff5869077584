package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/vmrunner/jail"
)

// The lifecycle with fake parts and a fake clock: no root, no sleeps.

const (
	cgPath = "/agentsandbox/run1/build"
	limit  = 64 << 20
)

var nsName = hoststate.NetnsName("run1", "build")

// fakeSandbox is the sandbox of step build of run1 on a fake host and
// clock, with the root directory the jail would get.
func fakeSandbox(t *testing.T) (*Sandbox, *fakeHost, *fakeClock, string) {
	t.Helper()
	stateDir, base := t.TempDir(), t.TempDir()
	root := filepath.Join(base, "root")
	h := newFakeHost(stateDir)
	clk := &fakeClock{log: h.log}
	sb := New(stateDir, "run1", "build", root)
	sb.host, sb.clock = h, clk
	return sb, h, clk, root
}

// started is a fake sandbox created and started, with its log cleared.
func started(t *testing.T) (*Sandbox, *fakeHost, *fakeClock) {
	t.Helper()
	sb, h, clk, root := fakeSandbox(t)
	if err := sb.Create(cgroup.Limits{MemoryBytes: limit}); err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(context.Background(), jail.Config{RootDir: root}); err != nil {
		t.Fatal(err)
	}
	h.log.lines = nil
	return sb, h, clk
}

func lines(ls ...string) string { return strings.Join(ls, "\n") }

func wantLog(t *testing.T, h *fakeHost, want string) {
	t.Helper()
	if got := h.log.text(); got != want {
		t.Errorf("the host was asked:\n%s\n\nwant:\n%s", got, want)
	}
}

func TestLifecycle(t *testing.T) {
	for _, v1 := range []bool{false, true} {
		t.Run(map[bool]string{false: "cgroup v2", true: "cgroup v1"}[v1], func(t *testing.T) {
			sb, h, _, root := fakeSandbox(t)
			h.v1 = v1
			if err := sb.Create(cgroup.Limits{MemoryBytes: limit, PIDs: 48}); err != nil {
				t.Fatal(err)
			}
			if err := sb.Mkdir(root, "jail root mount point"); err != nil {
				t.Fatal(err)
			}
			if err := sb.Start(context.Background(), jail.Config{RootDir: root}); err != nil {
				t.Fatal(err)
			}
			h.proc.exit(nil)
			x, err := sb.Wait(context.Background(), 0, 50*time.Millisecond, func(bool) { t.Error("stop called for a jail that exited") })
			if err != nil || x.Err != nil || x.HostTimeout {
				t.Errorf("Wait = %+v, %v; want a clean exit", x, err)
			}
			if err := sb.Cleanup(); err != nil {
				t.Fatal(err)
			}
			start := []string{
				"open cgroup " + cgPath,
				"start jail root=" + root + " netns=/run/netns/" + nsName + " cgroupfd=true",
			}
			if v1 {
				start = []string{
					"open cgroup " + cgPath + ": not on cgroup v1",
					"start jail root=" + root + " netns=/run/netns/" + nsName + " cgroupfd=false",
					"add pid 4242 to cgroup " + cgPath,
				}
			}
			wantLog(t, h, lines(append(append([]string{
				"create netns " + nsName + " (in the state file: true)",
				"create cgroup " + cgPath + " memory=67108864 pids=48 (in the state file: true)"},
				start...),
				"release jail",
				"ticker 50ms",
				"close jail",
				"delete cgroup "+cgPath,
				"delete netns "+nsName,
			)...))
			if exists(root) {
				t.Error("the jail's root mount point is left")
			}
			if n := states(t, h.stateDir); n != 0 {
				t.Errorf("%d state files left, want 0", n)
			}
		})
	}
}

func TestCreateFailures(t *testing.T) {
	for _, tc := range []struct {
		name    string
		set     func(*fakeHost)
		wantErr string
		log     string
	}{
		{"netns left by an earlier run",
			func(h *fakeHost) { h.netnsErr = fmt.Errorf("create netns %q: %w", nsName, fs.ErrExist) },
			"(left by an earlier run? `agentsandbox gc` removes leftovers)",
			lines("create netns " + nsName + " (in the state file: true)")},
		{"cgroup",
			func(h *fakeHost) { h.cgroupErr = errors.New("create cgroup: no memory controller") },
			"no memory controller",
			lines(
				"create netns "+nsName+" (in the state file: true)",
				"create cgroup "+cgPath+" memory=67108864 pids=0 (in the state file: true)",
				"delete netns "+nsName)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb, h, _, _ := fakeSandbox(t)
			tc.set(h)
			err := sb.Create(cgroup.Limits{MemoryBytes: limit})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Create = %v, want it to say %q", err, tc.wantErr)
			}
			if err := sb.Cleanup(); err != nil {
				t.Fatal(err)
			}
			wantLog(t, h, tc.log)
			if n := states(t, h.stateDir); n != 0 {
				t.Errorf("%d state files left, want 0", n)
			}
		})
	}
}

func TestStartFailureLeavesNoJail(t *testing.T) {
	sb, h, _, root := fakeSandbox(t)
	h.startErr = errors.New("start jail: no such init")
	if err := sb.Create(cgroup.Limits{}); err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(context.Background(), jail.Config{RootDir: root}); err == nil {
		t.Fatal("Start succeeded")
	}
	h.log.lines = nil
	if err := sb.Cleanup(); err != nil {
		t.Fatal(err)
	}
	wantLog(t, h, lines("delete cgroup "+cgPath, "delete netns "+nsName))
}

// TestStartCancelled: a context cancelled while the jail is being built
// kills it with its cgroup, and Start returns the context's error.
func TestStartCancelled(t *testing.T) {
	sb, h, _, root := fakeSandbox(t)
	if err := sb.Create(cgroup.Limits{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.holdRelease, h.onRelease = true, cancel
	h.log.lines = nil
	if err := sb.Start(ctx, jail.Config{RootDir: root}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start = %v, want context.Canceled", err)
	}
	wantLog(t, h, lines(
		"open cgroup "+cgPath,
		"start jail root="+root+" netns=/run/netns/"+nsName+" cgroupfd=true",
		"release jail",
		"kill cgroup "+cgPath,
		"kill jail",
	))
}

// waitAsync runs Wait on a goroutine; stop writes to the log and then
// does what the backend's stop would.
type waited struct {
	x   Exit
	err error
}

func waitAsync(sb *Sandbox, h *fakeHost, ctx context.Context, timeout time.Duration, stop func(bool)) <-chan waited {
	ch := make(chan waited, 1)
	go func() {
		x, err := sb.Wait(ctx, timeout, 50*time.Millisecond, func(timedOut bool) {
			h.log.add("stop timedOut=%v", timedOut)
			stop(timedOut)
		})
		ch <- waited{x, err}
	}()
	return ch
}

func receive(t *testing.T, ch <-chan waited) waited {
	t.Helper()
	select {
	case w := <-ch:
		return w
	case <-time.After(guard):
		t.Fatalf("Wait did not return within %v", guard)
		return waited{}
	}
}

// TestWaitPollsUsage: Wait reads the cgroup at every tick (the pids peak
// is only seen that way on kernels without pids.peak) and once after the
// exit, and returns that last reading.
func TestWaitPollsUsage(t *testing.T) {
	sb, h, clk := started(t)
	h.usage = cgroup.Usage{PidsPeak: 7}
	ch := waitAsync(sb, h, context.Background(), 0, func(bool) {})
	h.log.waitFor(t, "ticker", 1)
	for i := 1; i <= 3; i++ {
		clk.Advance(50 * time.Millisecond)
		h.log.waitFor(t, "read usage", i)
	}
	h.proc.exit(errors.New("jail init: exit status 3"))
	w := receive(t, ch)
	if w.err != nil || w.x.HostTimeout || w.x.Err == nil || w.x.Usage.PidsPeak != 7 {
		t.Errorf("Wait = %+v, %v; want the init's exit status and the usage", w.x, w.err)
	}
	h.log.waitFor(t, "read usage", 4)
}

// TestWaitHostTimeout: the host's deadline, not a moment before, stops the
// jail, and Wait says so.
func TestWaitHostTimeout(t *testing.T) {
	sb, h, clk := started(t)
	h.usage = cgroup.Usage{PeakMemoryBytes: 1 << 20}
	ch := waitAsync(sb, h, context.Background(), 10*time.Second, func(bool) { sb.Kill() })
	h.log.waitFor(t, "ticker", 1)
	clk.Advance(10*time.Second - time.Millisecond)
	h.log.waitFor(t, "read usage", 1) // the tick came, the deadline did not
	if strings.Contains(h.log.text(), "stop") {
		t.Fatalf("stopped before the deadline:\n%s", h.log.text())
	}
	clk.Advance(time.Millisecond)
	w := receive(t, ch)
	if w.err != nil || !w.x.HostTimeout || w.x.Err == nil || w.x.Usage.PeakMemoryBytes != 1<<20 {
		t.Errorf("Wait = %+v, %v; want a host timeout with the usage", w.x, w.err)
	}
	wantLog(t, h, lines(
		"timer 10s",
		"ticker 50ms",
		"stop timedOut=true",
		"kill cgroup "+cgPath,
		"kill jail",
	))
}

// TestWaitCancelled: a cancelled context stops the jail at once (not
// gracefully), waits for its exit and returns the context's error with the
// usage.
func TestWaitCancelled(t *testing.T) {
	sb, h, _ := started(t)
	h.usage = cgroup.Usage{CPUTime: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	ch := waitAsync(sb, h, ctx, time.Hour, func(bool) { sb.Kill() })
	h.log.waitFor(t, "ticker", 1)
	cancel()
	w := receive(t, ch)
	if !errors.Is(w.err, context.Canceled) || w.x.HostTimeout || w.x.Usage.CPUTime != time.Second {
		t.Errorf("Wait = %+v, %v; want context.Canceled with the usage", w.x, w.err)
	}
	wantLog(t, h, lines(
		"timer 1h0m0s",
		"ticker 50ms",
		"stop timedOut=false",
		"kill cgroup "+cgPath,
		"kill jail",
	))
}

// stages are the vm backend's: power off, quit, each with its grace; the
// jail exits at the stage named exitAt.
func stages(h *fakeHost, exitAt string) []Stage {
	ask := func(what string) func() {
		return func() {
			h.log.add("ask %s", what)
			if what == exitAt {
				h.proc.exit(nil)
			}
		}
	}
	return []Stage{
		{Ask: ask("power off"), Grace: 3 * time.Second},
		{Ask: ask("quit"), Grace: 3 * time.Second},
	}
}

// TestStopEscalation: each stage gets its grace and no more; the jail's
// exit ends the escalation; past the last stage the cgroup and the init
// are killed.
func TestStopEscalation(t *testing.T) {
	for _, tc := range []struct {
		name     string
		stages   func(h *fakeHost) []Stage
		advances int // graces that pass
		log      string
	}{
		{"exits when asked to power off", func(h *fakeHost) []Stage { return stages(h, "power off") }, 0,
			lines("ask power off", "timer 3s")},
		{"exits when told to quit", func(h *fakeHost) []Stage { return stages(h, "quit") }, 1,
			lines("ask power off", "timer 3s", "ask quit", "timer 3s")},
		{"killed", func(h *fakeHost) []Stage { return stages(h, "") }, 2,
			lines("ask power off", "timer 3s", "ask quit", "timer 3s", "kill cgroup "+cgPath, "kill jail")},
		{"a stage that only waits", func(h *fakeHost) []Stage { return []Stage{{Grace: time.Second}} }, 1,
			lines("timer 1s", "kill cgroup "+cgPath, "kill jail")},
		{"no stages: killed at once", func(h *fakeHost) []Stage { return nil }, 0,
			lines("kill cgroup "+cgPath, "kill jail")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb, h, clk := started(t)
			st := tc.stages(h)
			done := make(chan struct{})
			go func() {
				sb.Stop(st...)
				close(done)
			}()
			for i := 1; i <= tc.advances; i++ {
				h.log.waitFor(t, "timer", i)
				clk.Advance(st[i-1].Grace)
			}
			select {
			case <-done:
			case <-time.After(guard):
				t.Fatalf("Stop did not return; the log:\n%s", h.log.text())
			}
			wantLog(t, h, tc.log)
		})
	}
}

func TestStopAfterTheExitAsksNothing(t *testing.T) {
	sb, h, _ := started(t)
	h.proc.exit(nil)
	sb.Stop(stages(h, "")...)
	wantLog(t, h, "")
}

// TestHostTimeoutEscalatesToKill is the vm backend's way out of a hung
// guest, end to end on the fakes: the deadline passes, the guest ignores
// power-off and quit, the host kills the cgroup, and the step is a host
// timeout.
func TestHostTimeoutEscalatesToKill(t *testing.T) {
	sb, h, clk := started(t)
	ch := waitAsync(sb, h, context.Background(), 70*time.Second, func(graceful bool) {
		if graceful {
			sb.Stop(stages(h, "")...)
		} else {
			sb.Stop(stages(h, "")[1:]...)
		}
	})
	h.log.waitFor(t, "ticker", 1)
	clk.Advance(70 * time.Second)
	h.log.waitFor(t, "timer 3s", 1)
	clk.Advance(3 * time.Second)
	h.log.waitFor(t, "timer 3s", 2)
	clk.Advance(3 * time.Second)
	w := receive(t, ch)
	wantLog(t, h, lines(
		"timer 1m10s",
		"ticker 50ms",
		"stop timedOut=true",
		"ask power off",
		"timer 3s",
		"ask quit",
		"timer 3s",
		"kill cgroup "+cgPath,
		"kill jail",
	))
	status, detail := vmrunner.Classify(vmrunner.Facts{
		HostTimeout: w.x.HostTimeout, Usage: w.x.Usage, Exit: w.x.Err,
		ResultErr: fs.ErrNotExist, TimeoutMS: 10_000,
		Words: vmrunner.Words{Stopped: "the host stopped the VM"},
	})
	if status != vmrunner.StatusTimeout || detail != "ran past its 10000 ms timeout; the host stopped the VM" {
		t.Errorf("Classify = %s, %q; want a host timeout", status, detail)
	}
}

// TestCleanupKillsARunningJail: Cleanup of a jail that still runs kills
// it with its cgroup before it deletes anything.
func TestCleanupKillsARunningJail(t *testing.T) {
	sb, h, _ := started(t)
	if err := sb.Cleanup(); err != nil {
		t.Fatal(err)
	}
	wantLog(t, h, lines(
		"close jail",
		"kill cgroup "+cgPath,
		"kill jail",
		"delete cgroup "+cgPath,
		"delete netns "+nsName,
	))
}
