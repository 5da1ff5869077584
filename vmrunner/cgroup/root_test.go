package cgroup

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// These tests use the host's real cgroup hierarchies, in throwaway groups
// below /asb-test-RANDOM that they remove.

func testPath(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "/asb-test-" + hex.EncodeToString(b) + "/run/step"
}

func newGroup(t *testing.T, l Limits) *Group {
	t.Helper()
	testtier.Root(t)
	if Mode() == "unavailable" {
		testtier.Skip(t, "root", "no cgroup file system mounted")
	}
	g, err := New(testPath(t), l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Delete(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("host cgroup mode %s, group %s in %s", Mode(), g.Path(), g.Version())
	return g
}

// proc is a shell script running in a group.
type proc struct {
	cmd  *exec.Cmd
	done chan error
	out  *strings.Builder
}

// start runs script in g: on v2 the child is cloned into the group
// (UseCgroupFD); on v1 it waits on stdin until Add has placed it.
func start(t *testing.T, g *Group, script string) *proc {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "read _go; "+script)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if g.Version() == "v2" {
		f, err := g.FD()
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd())}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if g.Version() == "v1" {
		if err := g.Add(cmd.Process.Pid); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal(err)
		}
	}
	p := &proc{cmd: cmd, done: make(chan error, 1), out: out}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
	})
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	return p
}

func (p *proc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		return err
	case <-time.After(d):
		t.Fatalf("%v still running after %s; output: %s", p.cmd.Args, d, p.out)
		return nil
	}
}

// poll waits up to d for cond.
func poll(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ctrlFile is the control file of the named controller in g.
func ctrlFile(g *Group, controller, file string) string {
	switch b := g.b.(type) {
	case *v1:
		return filepath.Join(b.ctrl[controller], file)
	case *v2:
		return filepath.Join(b.dir(), file)
	}
	panic("unknown backend")
}

func TestRootLimitsWritten(t *testing.T) {
	g := newGroup(t, Limits{MemoryBytes: 64 << 20, PIDs: 50, VCPU: 1})
	trim := func(f string) string {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	var want map[string]string
	if g.Version() == "v1" {
		want = map[string]string{
			ctrlFile(g, "memory", "memory.limit_in_bytes"): "67108864",
			ctrlFile(g, "pids", "pids.max"):                "50",
			ctrlFile(g, "cpu", "cpu.cfs_quota_us"):         "100000",
			ctrlFile(g, "cpu", "cpu.cfs_period_us"):        "100000",
		}
		if f := ctrlFile(g, "memory", "memory.memsw.limit_in_bytes"); exists(f) {
			want[f] = "67108864"
		}
	} else {
		want = map[string]string{
			ctrlFile(g, "memory", "memory.max"): "67108864",
			ctrlFile(g, "pids", "pids.max"):     "50",
			ctrlFile(g, "cpu", "cpu.max"):       "100000 100000",
		}
		if f := ctrlFile(g, "memory", "memory.swap.max"); exists(f) {
			want[f] = "0"
		}
	}
	for f, v := range want {
		if got := trim(f); got != v {
			t.Errorf("%s = %q, want %q", f, got, v)
		}
	}
}

func TestRootAddPlacesProcess(t *testing.T) {
	g := newGroup(t, Limits{PIDs: 20})
	p := start(t, g, "exec sleep 100")
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var want []string
	if g.Version() == "v1" {
		want = []string{"memory", "pids", "cpu", "cpuacct", "freezer"}
	} else {
		want = []string{""}
	}
	for _, c := range want {
		found := false
		for _, l := range lines {
			parts := strings.SplitN(l, ":", 3)
			if len(parts) == 3 && parts[2] == g.Path() && hasField(parts[1], c) {
				found = true
			}
		}
		if !found {
			t.Errorf("pid %d not in %s of controller %q:\n%s", p.cmd.Process.Pid, g.Path(), c, b)
		}
	}
	pids, err := g.Pids()
	if err != nil || len(pids) != 1 || pids[0] != p.cmd.Process.Pid {
		t.Errorf("Pids = %v, %v, want [%d]", pids, err, p.cmd.Process.Pid)
	}
}

// hasField reports whether the comma-separated controller list has c
// (c == "" matches the unified hierarchy's empty list).
func hasField(list, c string) bool {
	if c == "" {
		return list == ""
	}
	for _, f := range strings.Split(list, ",") {
		if f == c {
			return true
		}
	}
	return false
}

func TestRootMemoryHogOOMKilled(t *testing.T) {
	g := newGroup(t, Limits{MemoryBytes: 64 << 20, PIDs: 20})
	// tail keeps the whole newline-free stream in memory.
	p := start(t, g, "head -c 600M /dev/zero | tail > /dev/null")
	err := p.wait(t, 60*time.Second)
	if err == nil {
		t.Fatalf("a 600 MiB hog succeeded in a 64 MiB group; output: %s", p.out)
	}
	u, uerr := g.Usage()
	if uerr != nil {
		t.Fatal(uerr)
	}
	t.Logf("hog: %v; usage %+v", err, u)
	if u.OOMKills < 1 {
		t.Errorf("OOMKills = %d, want at least 1", u.OOMKills)
	}
	if u.PeakMemoryBytes > 64<<20 || u.PeakMemoryBytes < 32<<20 {
		t.Errorf("peak memory %d, want close to the 64 MiB limit", u.PeakMemoryBytes)
	}
}

func TestRootForkBombHeldByPidsMax(t *testing.T) {
	const limit = 16
	g := newGroup(t, Limits{PIDs: limit})
	// A bounded bomb: 200 background sleeps, far above the limit.
	p := start(t, g, `i=0; while [ $i -lt 200 ]; do sleep 60 & i=$((i+1)); done; wait`)
	events := ctrlFile(g, "pids", "pids.events")
	poll(t, 20*time.Second, "pids.events reports a refused fork", func() bool {
		kv, err := readKV(events)
		return err == nil && kv["max"] > 0
	})
	u, err := g.Usage()
	if err != nil {
		t.Fatal(err)
	}
	cur, err := readInt(ctrlFile(g, "pids", "pids.current"))
	if err != nil {
		t.Fatal(err)
	}
	if u.PidsPeak > limit || cur > limit {
		t.Errorf("pids peak %d, current %d: above pids.max %d", u.PidsPeak, cur, limit)
	}
	if u.PidsPeak != limit {
		t.Errorf("pids peak %d, want the bomb to reach the limit %d", u.PidsPeak, limit)
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 10*time.Second)
	poll(t, 5*time.Second, "group empty after Kill", func() bool {
		pids, err := g.Pids()
		return err == nil && len(pids) == 0
	})
}

func TestRootUsageAfterWork(t *testing.T) {
	g := newGroup(t, Limits{VCPU: 1, PIDs: 20})
	// On a busy machine three shells may not exceed one CPU, so narrow the
	// quota to 5% here: throttling is then certain, and the test checks
	// that Usage reads it.
	if g.Version() == "v1" {
		write(t, ctrlFile(g, "cpu", "cpu.cfs_quota_us"), "5000")
	} else {
		write(t, ctrlFile(g, "cpu", "cpu.max"), "5000 100000")
	}
	busy := `(i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done)`
	p := start(t, g, busy+" & "+busy+" & "+busy+" & wait")
	if err := p.wait(t, 120*time.Second); err != nil {
		t.Fatalf("busy loops: %v: %s", err, p.out)
	}
	u, err := g.Usage()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("usage %+v", u)
	if u.CPUTime <= 0 || u.PeakMemoryBytes <= 0 || u.PidsPeak < 4 || u.ThrottledTime <= 0 {
		t.Errorf("usage %+v: want CPU time, peak memory, throttled time above 0 and pids peak at least 4", u)
	}
	if u.OOMKills != 0 {
		t.Errorf("OOMKills = %d without a memory limit", u.OOMKills)
	}
}

func TestRootKill(t *testing.T) {
	g := newGroup(t, Limits{PIDs: 20})
	p := start(t, g, "sleep 1000 & sleep 1000 & sleep 1000 & wait")
	poll(t, 5*time.Second, "four processes in the group", func() bool {
		pids, err := g.Pids()
		return err == nil && len(pids) == 4
	})
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	err := p.wait(t, 10*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("shell ended with %v, want SIGKILL", err)
	}
	poll(t, 5*time.Second, "group empty after Kill", func() bool {
		pids, err := g.Pids()
		return err == nil && len(pids) == 0
	})
	if fz, ok := g.b.(*v1); ok {
		if b, _ := os.ReadFile(filepath.Join(fz.ctrl["freezer"], "freezer.state")); strings.TrimSpace(string(b)) != "THAWED" {
			t.Errorf("freezer.state after Kill = %q, want THAWED", b)
		}
	}
}

func TestRootDeleteRemovesEverything(t *testing.T) {
	g := newGroup(t, Limits{MemoryBytes: 32 << 20, PIDs: 20, VCPU: 1})
	top := "/" + strings.Split(g.Path(), "/")[1]
	sibling, err := New(filepath.Dir(g.Path())+"/other", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := List(top)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{sibling.Path(), g.Path()}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("List(%s) = %v, want %v", top, got, want)
	}

	start(t, g, "sleep 1000 & exec sleep 1000")
	poll(t, 5*time.Second, "two processes in the group", func() bool {
		pids, err := g.Pids()
		return err == nil && len(pids) == 2
	})
	dirs := g.Dirs()
	if err := g.Delete(); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if exists(d) {
			t.Errorf("%s left after Delete", d)
		}
		if !exists(filepath.Join(filepath.Dir(d), "other")) {
			t.Errorf("Delete pruned the run directory of %s while a sibling group was in it", d)
		}
	}
	if err := g.Delete(); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if err := DeleteByPath(sibling.Path()); err != nil {
		t.Fatal(err)
	}
	for _, d := range sibling.Dirs() {
		top := strings.TrimSuffix(d, strings.TrimPrefix(sibling.Path(), top))
		if exists(top) {
			t.Errorf("%s left after the last group was deleted", top)
		}
	}
	if got, err := List(top); err != nil || len(got) != 0 {
		t.Errorf("List(%s) after delete = %v, %v", top, got, err)
	}
	if err := DeleteByPath(sibling.Path()); err != nil {
		t.Errorf("DeleteByPath of a removed group: %v", err)
	}
}

func TestRootFailedNewLeavesNothing(t *testing.T) {
	testtier.Root(t)
	p := testPath(t)
	// No such block device: the kernel refuses the io limit after the
	// directories exist.
	_, err := New(p, Limits{MemoryBytes: 32 << 20, IOWriteBps: 1 << 20, IODevices: []Device{{4095, 4095}}})
	if err == nil {
		t.Fatal("New accepted an io limit on a device that does not exist")
	}
	t.Logf("New: %v", err)
	g, err := open(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range g.Dirs() {
		if exists(d) {
			t.Errorf("%s left after a failed New", d)
		}
	}
	top := "/" + strings.Split(p, "/")[1]
	if got, err := List(top); err != nil || len(got) != 0 {
		t.Errorf("List(%s) = %v, %v after a failed New", top, got, err)
	}
}

func TestRootDeviceOf(t *testing.T) {
	testtier.Root(t)
	d, err := DeviceOf("/")
	if err != nil {
		// Overlay or tmpfs roots have no block device; say so clearly.
		if !strings.Contains(err.Error(), "not a block device") {
			t.Errorf("DeviceOf(/) = %v, want a device or a 'not a block device' error", err)
		}
		return
	}
	if !exists(fmt.Sprintf("/sys/dev/block/%s", d)) {
		t.Errorf("DeviceOf(/) = %s, not a block device", d)
	}
	if exists(fmt.Sprintf("/sys/dev/block/%s/partition", d)) {
		t.Errorf("DeviceOf(/) gave partition %s, want its disk", d)
	}
}

// TestRootIOLimitsWritten sets IO throttling on the disk holding / through
// the library's blkio (v1) or io (v2) controller and reads it back.
func TestRootIOLimitsWritten(t *testing.T) {
	testtier.Root(t)
	d, err := DeviceOf("/")
	if err != nil {
		testtier.Skip(t, "root", fmt.Sprintf("no block device under / to throttle: %v", err))
	}
	g := newGroup(t, Limits{PIDs: 20, IOReadBps: 2 << 20, IOWriteBps: 1 << 20, IODevices: []Device{d}})
	if g.Version() == "v1" {
		for f, v := range map[string]string{
			"blkio.throttle.read_bps_device":  fmt.Sprintf("%s %d", d, 2<<20),
			"blkio.throttle.write_bps_device": fmt.Sprintf("%s %d", d, 1<<20),
		} {
			b, err := os.ReadFile(ctrlFile(g, "blkio", f))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(b)); got != v {
				t.Errorf("%s = %q, want %q", f, got, v)
			}
		}
		if len(g.Dirs()) != 6 {
			t.Errorf("dirs %v, want blkio among six", g.Dirs())
		}
	} else {
		b, err := os.ReadFile(ctrlFile(g, "io", "io.max"))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%s rbps=%d wbps=%d", d, 2<<20, 1<<20); !strings.Contains(string(b), want) {
			t.Errorf("io.max = %q, want a line starting %q", b, want)
		}
	}
	start(t, g, "exec true").wait(t, 10*time.Second)
	if _, err := g.Usage(); err != nil {
		t.Errorf("Usage of a group with IO limits: %v", err)
	}
	dirs := g.Dirs()
	if err := g.Delete(); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if exists(d) {
			t.Errorf("%s left after Delete", d)
		}
	}
}

// TestRootConcurrentRunsShareTheTop: groups of different runs are made
// and deleted at once, as concurrent applies do. A Delete prunes the
// emptied /RUN and top parents, which races with a New making its own
// below them; New makes its group again instead of failing with ENOENT.
func TestRootConcurrentRunsShareTheTop(t *testing.T) {
	first := newGroup(t, Limits{}) // checks the tier, and names the top
	top := strings.Split(first.Path(), "/")[1]
	if err := first.Delete(); err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 4, 60
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range rounds {
				g, err := New(fmt.Sprintf("/%s/race-%d-%d/step", top, w, i), Limits{PIDs: 10})
				if err != nil {
					errs <- err
					return
				}
				if err := g.Delete(); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if left, err := List("/" + top); err != nil || len(left) > 0 {
		t.Errorf("groups left under /%s: %v %v", top, left, err)
	}
}
