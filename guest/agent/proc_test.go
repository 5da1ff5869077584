//go:build linux

package agent

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
)

// ran is how one command ended, run one of the two ways the agent runs
// commands.
type ran struct {
	how      string // "job" or "session"
	exitCode int
	signal   string
	timedOut bool
	rusage   guest.Rusage
	stdout   string
	took     time.Duration
}

// runBoth runs command as a batch job (RunJob) and as a session's exec
// (RunSession), with the given timeout, and says how each ended.
func runBoth(t *testing.T, timeoutMS int64, command ...string) []ran {
	t.Helper()
	job := selfJob(t, command...)
	job.TimeoutMS = timeoutMS
	start := time.Now()
	res, dir, _ := run(t, context.Background(), job)
	took := time.Since(start)
	if res.Error != "" {
		t.Fatalf("job: %+v", res)
	}
	out := []ran{{how: "job", exitCode: res.ExitCode, signal: res.Signal, timedOut: res.TimedOut, rusage: res.Rusage,
		stdout: readFile(t, filepath.Join(dir, guest.StdoutFile)), took: took}}

	q := selfExec(command...)
	q.TimeoutMS = timeoutMS
	sdir := serve(t, SessionOptions{})
	start = time.Now()
	o := run1(t, sdir, q)
	took = time.Since(start)
	if o.exit == nil {
		t.Fatalf("session exec: %+v", o)
	}
	return append(out, ran{how: "session", exitCode: o.exit.ExitCode, signal: o.exit.Signal, timedOut: o.exit.TimedOut,
		rusage: o.exit.Rusage, stdout: o.stdout, took: took})
}

// firstPID is the pid a command printed on its first line of stdout.
func firstPID(t *testing.T, r ran) int {
	t.Helper()
	line, _, _ := strings.Cut(r.stdout, "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		t.Fatalf("%s: no pid on the first line of stdout %q", r.how, r.stdout)
	}
	return pid
}

// gone waits (bounded) for pid to be dead or a zombie.
func gone(pid int) bool {
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// TestLeftoverKilledAtEnd: what a command leaves running in its process
// group (`server &`) is killed when the command ends, for a job and a
// session's exec alike, and the end does not wait for it.
func TestLeftoverKilledAtEnd(t *testing.T) {
	for _, r := range runBoth(t, 0, "sh", "-c", "sleep 300 & echo $!; exit 4") {
		if r.exitCode != 4 || r.signal != "" || r.timedOut {
			t.Errorf("%s: %+v, want exit 4", r.how, r)
		}
		if child := firstPID(t, r); !gone(child) {
			syscall.Kill(child, syscall.SIGKILL)
			t.Errorf("%s: the background child %d outlived the command", r.how, child)
		}
		if r.took > 2*time.Second {
			t.Errorf("%s: took %v: the end waited for the background child", r.how, r.took)
		}
	}
}

// TestLeftGroupDoesNotHoldEnd: a process that left the group (setsid) is
// the one thing that outlives the command; while it holds the output
// pipes, the end still comes within the drain bound.
func TestLeftGroupDoesNotHoldEnd(t *testing.T) {
	for _, r := range runBoth(t, 0, "sh", "-c", "setsid sleep 30 & echo $!; sleep 0.2; exit 5") {
		child := firstPID(t, r)
		if !alive(child) {
			t.Errorf("%s: the setsid child %d did not live on", r.how, child)
		}
		syscall.Kill(child, syscall.SIGKILL)
		if r.exitCode != 5 {
			t.Errorf("%s: %+v, want exit 5", r.how, r)
		}
		if r.took < drainIdle || r.took > drainIdle+2*time.Second {
			t.Errorf("%s: took %v, want the drain's silence bound of %v and little more", r.how, r.took, drainIdle)
		}
	}
}

// TestLeftGroupWritingDoesNotHoldEnd: a process that left the group and
// keeps writing to the pipes holds the end for drainMax at most.
func TestLeftGroupWritingDoesNotHoldEnd(t *testing.T) {
	for _, r := range runBoth(t, 0, "sh", "-c", "setsid sh -c 'echo $$; while :; do echo more; sleep 0.1; done' & sleep 0.2; exit 0") {
		child := firstPID(t, r)
		syscall.Kill(child, syscall.SIGKILL)
		if r.took < drainMax || r.took > drainMax+3*time.Second {
			t.Errorf("%s: took %v, want the drain's bound of %v and little more", r.how, r.took, drainMax)
		}
	}
}

// TestTimeoutKillsGroup: at the timeout the whole group gets SIGTERM and,
// when it ignores it, SIGKILL after guest.KillGrace, for both.
func TestTimeoutKillsGroup(t *testing.T) {
	for _, r := range runBoth(t, 200, "sh", "-c", "trap '' TERM; sleep 300 & echo $!; wait") {
		if !r.timedOut || r.signal != "SIGKILL" || r.exitCode != -1 {
			t.Errorf("%s: %+v, want timed out and killed by SIGKILL", r.how, r)
		}
		if r.took < guest.KillGrace {
			t.Errorf("%s: killed after %v, before the grace of %v", r.how, r.took, guest.KillGrace)
		}
		if child := firstPID(t, r); !gone(child) {
			syscall.Kill(child, syscall.SIGKILL)
			t.Errorf("%s: the group's child %d outlived the timeout", r.how, child)
		}
	}
}

// TestRusageReported: both report the command's resource use.
func TestRusageReported(t *testing.T) {
	for _, r := range runBoth(t, 0, "sh", "-c", `i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done`) {
		if r.exitCode != 0 || r.rusage.MaxRSSKiB <= 0 || r.rusage.UserMS+r.rusage.SystemMS <= 0 {
			t.Errorf("%s: %+v, want exit 0, some CPU time and a max RSS", r.how, r)
		}
	}
}

// TestStartProcFailsClean: a command that cannot start leaves no
// descriptor of the agent's open.
func TestStartProcFailsClean(t *testing.T) {
	before := openFDs(t)
	job := selfJob(t, "/nonexistent/prog")
	if _, err := startProc(newReaper(false), job, procIO{Stdin: true}); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("startProc of a missing binary: %v", err)
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d descriptors open after a failed start, %d before", after, before)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// TestOutputReadFromWait: nothing of the output is read before wait, so a
// session's "started" event (sent between startProc and wait) always comes
// first.
func TestOutputReadFromWait(t *testing.T) {
	var read atomic.Bool
	sink := func(r io.Reader) error {
		b, err := io.ReadAll(r)
		if len(b) > 0 {
			read.Store(true)
		}
		return err
	}
	p, err := startProc(newReaper(false), selfJob(t, "echo", "hi"), procIO{Stdout: sink, Stderr: sink})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the command has written by now
	if read.Load() {
		t.Error("output was read before wait")
	}
	if end := p.wait(context.Background(), nil); end.ExitCode != 0 || !read.Load() {
		t.Errorf("end %+v, output read %v", end, read.Load())
	}
}
