package namespace

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/runnertest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/vmrunner"
)

// openSession opens a session job in a fresh sandbox and stops it (and
// checks nothing is left) when the test ends.
func openSession(t testing.TB) (*Sandbox, vmrunner.StepSpec, Options) {
	t.Helper()
	testtier.Root(t)
	opts := Options{StateDir: t.TempDir(), JailDir: t.TempDir()}
	b := New(opts)
	spec := sessionSpec(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := b.Open(ctx, spec)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { sb.Stop(context.Background()) })
	return sb.(*Sandbox), spec, opts
}

func sessionSpec(t testing.TB) vmrunner.StepSpec {
	spec := suiteOpts.Spec(t, "session", nil)
	spec.Job.Session = true
	spec.Job.TimeoutMS = 0 // no default timeout for the session's commands
	spec.Step.Resources.TimeoutMS = 0
	runnertest.WriteJob(t, spec)
	return spec
}

// drain reads an exec's events to the end; the stream must end with an
// exit or error event.
func drain(t testing.TB, x vmrunner.Exec) runnertest.ExecOut {
	t.Helper()
	o := runnertest.Drain(x)
	if o.Err != nil {
		t.Errorf("exec stream: %v", o.Err)
	}
	return o
}

func execWait(t testing.TB, s *Sandbox, q guest.SessionRequest) runnertest.ExecOut {
	t.Helper()
	x, err := s.Exec(context.Background(), q)
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	defer x.Close()
	return drain(t, x)
}

func TestSessionExec(t *testing.T) {
	s, spec, opts := openSession(t)
	o := execWait(t, s, runnertest.SessionRequest(spec, "echo", "hi"))
	if o.Exit == nil || o.Exit.ExitCode != 0 || o.Stdout != "hi\n" || o.PID <= 0 {
		t.Fatalf("echo hi: %+v", o)
	}
	o = execWait(t, s, runnertest.SessionRequest(spec, "sh", "-c", "echo err >&2; exit 3"))
	if o.Exit == nil || o.Exit.ExitCode != 3 || o.Stderr != "err\n" {
		t.Fatalf("exit 3: %+v", o)
	}
	// The command runs as the job's user in the workspace, which it can write.
	o = execWait(t, s, runnertest.SessionRequest(spec, "sh", "-c", "id -u; pwd; echo x > f"))
	if o.Exit == nil || o.Exit.ExitCode != 0 || o.Stdout != strconv.Itoa(guest.DefaultUID)+"\n"+guest.WorkspaceMount+"\n" {
		t.Fatalf("id/pwd: %+v", o)
	}
	if b, err := os.ReadFile(filepath.Join(spec.Workspace, "f")); err != nil || string(b) != "x\n" {
		t.Errorf("workspace file: %q, %v", b, err)
	}
	o = execWait(t, s, runnertest.SessionRequest(spec, "no-such-command"))
	if o.Error == "" || o.Exit != nil {
		t.Errorf("missing command: %+v, want an error event", o)
	}
	if !strings.HasPrefix(s.Seccomp(), "sha256:") {
		t.Errorf("Seccomp() = %q", s.Seccomp())
	}
	u, err := s.Usage()
	if err != nil || u.CPUTime <= 0 || u.Pids < 1 {
		t.Errorf("Usage: %+v, %v", u, err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Error("Done not closed after Stop")
	}
	res, ok, err := vmrunner.ReadResult(spec.ControlDir)
	if err != nil || !ok || res.ExitCode != 0 || res.Error != "" {
		t.Errorf("result after Stop: %+v, %v, %v; want exit 0", res, ok, err)
	}
	assertClean(t, opts, spec)
	if _, err := os.Lstat(filepath.Join(spec.ControlDir, guest.SessionSocket)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("session socket left: %v", err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestSessionStdinRoundTrip(t *testing.T) {
	s, spec, _ := openSession(t)
	q := runnertest.SessionRequest(spec, "cat")
	q.Stdin = true
	x, err := s.Exec(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	in := bytes.Repeat([]byte("stdin round trip\n"), 20000) // 340 kB: several chunks
	go func() {
		if err := x.WriteStdin(in); err != nil {
			t.Error(err)
		}
		if err := x.CloseStdin(); err != nil {
			t.Error(err)
		}
	}()
	o := drain(t, x)
	if o.Exit == nil || o.Exit.ExitCode != 0 || o.Stdout != string(in) {
		t.Fatalf("cat: %d of %d bytes back, exit %+v", len(o.Stdout), len(in), o.Exit)
	}
}

// TestSessionConcurrentExecs: six execs meet at a barrier in the
// sandbox's /tmp, which none passes until all have arrived, so they can
// only finish if they run side by side; each keeps its own output and exit.
func TestSessionConcurrentExecs(t *testing.T) {
	s, spec, _ := openSession(t)
	const n = 6
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			script := "touch /tmp/arrived." + strconv.Itoa(i) +
				"; while [ $(ls /tmp/arrived.* | wc -l) -lt " + strconv.Itoa(n) + " ]; do sleep 0.05; done" +
				"; echo " + strconv.Itoa(i) + "; exit " + strconv.Itoa(i)
			q := runnertest.SessionRequest(spec, "sh", "-c", script)
			q.TimeoutMS = 20_000
			o := execWait(t, s, q)
			if o.Exit == nil || o.Exit.TimedOut || o.Exit.ExitCode != i || o.Stdout != strconv.Itoa(i)+"\n" {
				t.Errorf("exec %d: %+v", i, o)
			}
		}()
	}
	wg.Wait()
}

func TestSessionTimeoutAndSignal(t *testing.T) {
	s, spec, _ := openSession(t)
	q := runnertest.SessionRequest(spec, "sh", "-c", "trap '' TERM; sleep 30")
	q.TimeoutMS = 300
	start := time.Now()
	o := execWait(t, s, q)
	if o.Exit == nil || !o.Exit.TimedOut || o.Exit.Signal != "SIGKILL" {
		t.Fatalf("timeout: %+v", o)
	}
	if d := time.Since(start); d > guest.KillGrace+5*time.Second {
		t.Errorf("timeout took %v", d)
	}

	x, err := s.Exec(context.Background(), runnertest.SessionRequest(spec, "sh", "-c", "echo up; sleep 30"))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	for ev := range x.Events() {
		if ev.Type == guest.EventStdout {
			break
		}
	}
	if err := x.Signal("SIGINT"); err != nil {
		t.Fatal(err)
	}
	if err := x.Signal("SIGBOGUS"); err == nil {
		t.Error("Signal(SIGBOGUS) accepted")
	}
	o = drain(t, x)
	if o.Exit == nil || o.Exit.Signal != "SIGINT" {
		t.Fatalf("signal: %+v", o)
	}
}

// TestSessionDisconnectAndOrphans: a client that goes away mid-exec takes
// the command's process group with it; a background process a finished
// command left is reaped by the agent (PID 1), not left a zombie.
func TestSessionDisconnectAndOrphans(t *testing.T) {
	s, spec, _ := openSession(t)
	ctx, cancel := context.WithCancel(context.Background())
	x, err := s.Exec(ctx, runnertest.SessionRequest(spec, "sh", "-c", "sleep 60 & echo $!; wait"))
	if err != nil {
		t.Fatal(err)
	}
	var child string
	for ev := range x.Events() {
		if ev.Type == guest.EventStdout {
			child = strings.TrimSpace(string(ev.Data))
			break
		}
	}
	cancel() // the client goes away
	for range x.Events() {
	}
	if x.(*Exec).Err() == nil {
		t.Error("Err nil after a cancelled exec")
	}
	// Seen from inside: the sleeper is gone (or a zombie no longer: ps
	// state Z would mean no one reaped it).
	waitFor(t, 5*time.Second, func() bool {
		o := execWait(t, s, runnertest.SessionRequest(spec, "sh", "-c", "test -e /proc/"+child+" && cat /proc/"+child+"/stat; true"))
		return o.Stdout == ""
	}, "the disconnected exec's sleeper "+child+" to be killed and reaped")

	// An orphan: the shell exits at once, its sleeper outlives it.
	o := execWait(t, s, runnertest.SessionRequest(spec, "sh", "-c", "sleep 0.3 >/dev/null 2>&1 & echo $!; exit 5"))
	if o.Exit == nil || o.Exit.ExitCode != 5 {
		t.Fatalf("orphan maker: %+v", o)
	}
	orphan := strings.TrimSpace(o.Stdout)
	waitFor(t, 5*time.Second, func() bool {
		o := execWait(t, s, runnertest.SessionRequest(spec, "sh", "-c", "test -e /proc/"+orphan+" && cat /proc/"+orphan+"/stat; true"))
		return o.Stdout == ""
	}, "the orphan "+orphan+" to be reaped")
}

func waitFor(t *testing.T, d time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSessionStopWithRunningExec: Stop kills what runs, reports its exit
// to the client and leaves nothing behind.
func TestSessionStopWithRunningExec(t *testing.T) {
	s, spec, opts := openSession(t)
	x, err := s.Exec(context.Background(), runnertest.SessionRequest(spec, "sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-x.Events(); ev.Type != guest.EventStarted {
		t.Fatalf("first event %+v", ev)
	}
	start := time.Now()
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d >= StopGrace {
		t.Errorf("Stop took %v: the agent did not end on SIGTERM, the host had to kill it", d)
	}
	var exit *guest.SessionEvent
	for ev := range x.Events() {
		if ev.Type == guest.EventExit {
			exit = &ev
		}
	}
	if exit == nil || exit.Signal != "SIGKILL" {
		t.Errorf("running exec after Stop: exit %+v, err %v", exit, x.(*Exec).Err())
	}
	assertClean(t, opts, spec)
	if _, err := s.Exec(context.Background(), runnertest.SessionRequest(spec, "true")); err == nil {
		t.Error("Exec after Stop worked")
	}
}

// TestSessionJailDies: when the jail ends by itself (its init killed),
// Done closes and Stop still cleans up everything.
func TestSessionJailDies(t *testing.T) {
	s, spec, opts := openSession(t)
	s.j.sb.Kill()
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the jail was killed")
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertClean(t, opts, spec)
}

// TestSessionOpenCancelled: a context done during Open leaves nothing.
func TestSessionOpenCancelled(t *testing.T) {
	_, _ = rootBackend(t)
	opts := Options{StateDir: t.TempDir(), JailDir: t.TempDir()}
	spec := sessionSpec(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := New(opts).Open(ctx, spec); !errors.Is(err, context.Canceled) {
		t.Errorf("Open with a done context: %v, want context.Canceled", err)
	}
	assertClean(t, opts, spec)

	// A batch job's sandbox runs its command and refuses other ones.
	spec = suiteOpts.Spec(t, "oneshot", []string{"true"})
	runnertest.WriteJob(t, spec)
	sb, err := New(opts).Open(context.Background(), spec)
	if err != nil {
		t.Fatalf("Open of a batch job: %v", err)
	}
	if _, err := sb.Exec(context.Background(), runnertest.SessionRequest(spec, "true")); !errors.Is(err, vmrunner.ErrBatchExec) {
		t.Errorf("Exec in a batch job's sandbox: %v, want ErrBatchExec", err)
	}
	if res, err := sb.Wait(context.Background()); err != nil || res.Status != vmrunner.StatusSucceeded {
		t.Errorf("Wait: %+v, %v", res, err)
	}
	if err := sb.Stop(context.Background()); err != nil {
		t.Error(err)
	}
	assertClean(t, opts, spec)
}

// TestSessionStopCancelled: Stop with a done context does not wait for the
// agent: it kills the jail and still removes everything.
func TestSessionStopCancelled(t *testing.T) {
	s, spec, opts := openSession(t)
	x, err := s.Exec(context.Background(), runnertest.SessionRequest(spec, "sh", "-c", "trap '' TERM; sleep 60"))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if ev := <-x.Events(); ev.Type != guest.EventStarted {
		t.Fatalf("first event %+v", ev)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d >= StopGrace/2 {
		t.Errorf("Stop with a done context took %v: it waited for the agent", d)
	}
	for range x.Events() {
	}
	assertClean(t, opts, spec)
}

// TestSessionSocketHostOnly: a command running as root inside the sandbox
// can reach the session socket (it owns the control directory) but the
// agent hangs up on it: only the host, outside the jail's pid namespace,
// may run commands through it.
func TestSessionSocketHostOnly(t *testing.T) {
	py := testtier.Command(t, "root", "python3", "Debian: apt-get install python3")
	if !strings.HasPrefix(py, "/usr/") {
		py = "/usr/bin/python3"
		if _, err := os.Stat(py); err != nil {
			testtier.Skip(t, "root", "no /usr/bin/python3 to bind into the jail (apt-get install python3)")
		}
	}
	s, spec, _ := openSession(t)
	q := runnertest.SessionRequest(spec, py, "-c", `
import socket
s = socket.socket(socket.AF_UNIX)
s.connect("`+guest.ControlMount+`/`+guest.SessionSocket+`")
try:
    s.sendall(b'{"op":"ping"}\n')
    print("answer:", s.recv(100))
except OSError as e:
    print("refused:", e)
`)
	q.UID, q.GID = 0, 0
	o := execWait(t, s, q)
	if o.Exit == nil || o.Exit.ExitCode != 0 {
		t.Fatalf("probe: %+v", o)
	}
	t.Logf("probe: %q", o.Stdout)
	if strings.Contains(o.Stdout, "pong") || !(strings.Contains(o.Stdout, "answer: b''") || strings.Contains(o.Stdout, "refused:")) {
		t.Fatalf("a root command inside reached the agent: %q", o.Stdout)
	}
}
