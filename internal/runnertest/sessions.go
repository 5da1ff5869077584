package runnertest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/vmrunner"
)

// RunSessions is the session conformance suite, beside Run: every backend
// opens a session job's sandbox (vmrunner.Backend.Open) whose commands
// (Exec) report their output and exit in order; run in the workspace,
// where the host sees what they write; read stdin; are signalled; run side
// by side; and end with the sandbox at Stop, which leaves the sandbox
// Done, its Wait returned and later Execs refused. A batch job's sandbox
// refuses Exec (vmrunner.ErrBatchExec) and still runs its own command.
// newBackend returns a fresh backend for each subtest; opts are Run's.
func RunSessions(t *testing.T, newBackend func(t *testing.T) vmrunner.Backend, opts Options) {
	s := &suite{opts: opts, newBackend: newBackend}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"Output", s.testSessionOutput},
		{"Workspace", s.testSessionWorkspace},
		{"Stdin", s.testSessionStdin},
		{"Signal", s.testSessionSignal},
		{"Concurrent", s.testSessionConcurrent},
		{"Stop", s.testSessionStop},
		{"BatchRefusesExec", s.testBatchRefusesExec},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if opts.Setup != nil {
				opts.Setup(t)
			}
			tc.fn(t)
		})
	}
}

// SessionSpec is a session job's spec: no command, and no timeout of the
// job's or the step's (the sandbox lives until Stop).
func (o Options) SessionSpec(t testing.TB, name string) vmrunner.StepSpec {
	t.Helper()
	spec := o.Spec(t, name, nil)
	spec.Job.Session = true
	spec.Job.TimeoutMS = 0
	spec.Step.Resources.TimeoutMS = 0
	return spec
}

// openSession writes spec's job and opens its sandbox, stopped when the
// test ends.
func (s *suite) openSession(t *testing.T, spec vmrunner.StepSpec) vmrunner.Sandbox {
	t.Helper()
	WriteJob(t, spec)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := s.newBackend(t).Open(ctx, spec)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return sb
}

// startExec starts q, given a minute and let go of when the test ends.
func startExec(t *testing.T, sb vmrunner.Sandbox, q guest.SessionRequest) vmrunner.Exec {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	x, err := sb.Exec(ctx, q)
	if err != nil {
		cancel()
		t.Fatalf("Exec %q: %v", q.Command, err)
	}
	t.Cleanup(func() { x.Close(); cancel() })
	return x
}

// execOut runs q to its end within a minute.
func execOut(t *testing.T, sb vmrunner.Sandbox, q guest.SessionRequest) ExecOut {
	t.Helper()
	return Drain(startExec(t, sb, q))
}

func exitCode(o ExecOut) int {
	if o.Exit == nil {
		return -1000
	}
	return o.Exit.ExitCode
}

func (s *suite) testSessionOutput(t *testing.T) {
	spec := s.opts.SessionSpec(t, "session-output")
	sb := s.openSession(t, spec)
	o := execOut(t, sb, SessionRequest(spec, "sh", "-c", "echo out; echo err >&2; exit 3"))
	if o.Stdout != "out\n" || o.Stderr != "err\n" || exitCode(o) != 3 || o.PID <= 0 {
		t.Errorf("exec: %+v, want stdout \"out\", stderr \"err\", exit 3 after a started event", o)
	}
	// The sandbox runs one command after another.
	if o := execOut(t, sb, SessionRequest(spec, "echo", "again")); o.Stdout != "again\n" || exitCode(o) != 0 {
		t.Errorf("second exec: %+v", o)
	}
	// A command that cannot start is an error event, and the session goes on.
	if o := execOut(t, sb, SessionRequest(spec, "no-such-command-here")); o.Exit != nil || o.Error == "" {
		t.Errorf("exec of a missing command: %+v, want an error event", o)
	}
	// A request without a command is refused before it reaches the agent.
	if _, err := sb.Exec(context.Background(), guest.SessionRequest{Env: spec.Job.Env}); err == nil {
		t.Error("Exec of a request without a command: no error")
	}
	if _, err := sb.Usage(); err != nil {
		t.Errorf("Usage of an open sandbox: %v", err)
	}
}

func (s *suite) testSessionWorkspace(t *testing.T) {
	spec := s.opts.SessionSpec(t, "session-workspace")
	sb := s.openSession(t, spec)
	if err := os.Mkdir(filepath.Join(spec.Workspace, "sub"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(spec.Workspace, "sub"), 0o777); err != nil {
		t.Fatal(err)
	}
	q := SessionRequest(spec, "sh", "-c", "echo from-the-sandbox > made.txt")
	q.Workdir = "sub" // relative to the workspace
	if o := execOut(t, sb, q); exitCode(o) != 0 {
		t.Fatalf("exec in sub: %+v", o)
	}
	b, err := os.ReadFile(filepath.Join(spec.Workspace, "sub", "made.txt"))
	if err != nil || string(b) != "from-the-sandbox\n" {
		t.Errorf("the host's workspace has %q (%v), want what the command wrote", b, err)
	}
}

func (s *suite) testSessionStdin(t *testing.T) {
	spec := s.opts.SessionSpec(t, "session-stdin")
	sb := s.openSession(t, spec)
	q := SessionRequest(spec, "cat")
	q.Stdin = true
	x := startExec(t, sb, q)
	if err := x.WriteStdin([]byte("through stdin\n")); err != nil {
		t.Fatal(err)
	}
	if err := x.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if o := Drain(x); o.Stdout != "through stdin\n" || exitCode(o) != 0 {
		t.Errorf("cat: %+v", o)
	}
}

func (s *suite) testSessionSignal(t *testing.T) {
	spec := s.opts.SessionSpec(t, "session-signal")
	sb := s.openSession(t, spec)
	x := startExec(t, sb, SessionRequest(spec, "sh", "-c", "trap 'echo got-term; exit 7' TERM; echo up; while :; do sleep 0.1; done"))
	var o ExecOut
	for ev := range x.Events() {
		switch ev.Type {
		case guest.EventStdout:
			o.Stdout += string(ev.Data)
			if o.Stdout == "up\n" {
				if err := x.Signal("SIGTERM"); err != nil {
					t.Fatal(err)
				}
			}
		case guest.EventExit:
			o.Exit = &ev
		}
	}
	if o.Stdout != "up\ngot-term\n" || exitCode(o) != 7 {
		t.Errorf("signalled command: stdout %q, exit %v; want its TERM trap to run and exit 7", o.Stdout, o.Exit)
	}
	if err := x.Signal("SIGNOTONE"); err == nil {
		t.Error("Signal of a made-up name: no error")
	}
}

func (s *suite) testSessionConcurrent(t *testing.T) {
	spec := s.opts.SessionSpec(t, "session-concurrent")
	sb := s.openSession(t, spec)
	// The first waits for a file the second makes: they must run at once.
	slow := startExec(t, sb, SessionRequest(spec, "sh", "-c", "while [ ! -e go ]; do sleep 0.05; done; echo first"))
	if o := execOut(t, sb, SessionRequest(spec, "sh", "-c", "touch go; echo second")); o.Stdout != "second\n" {
		t.Errorf("second exec: %+v", o)
	}
	if o := Drain(slow); o.Stdout != "first\n" || exitCode(o) != 0 {
		t.Errorf("first exec: %+v", o)
	}
}

func (s *suite) testSessionStop(t *testing.T) {
	spec := s.opts.SessionSpec(t, "session-stop")
	sb := s.openSession(t, spec)
	x := startExec(t, sb, SessionRequest(spec, "sh", "-c", "echo running; sleep 600"))
	for ev := range x.Events() {
		if ev.Type == guest.EventStdout {
			break
		}
	}
	waited := make(chan error, 1)
	go func() {
		_, err := sb.Wait(context.Background())
		waited <- err
	}()
	start := time.Now()
	if err := sb.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("Stop took %v", d)
	}
	select {
	case <-sb.Done():
	default:
		t.Error("Done is not closed after Stop")
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("Wait: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait did not return after Stop")
	}
	// The running command's events end (with or without an exit event).
	ended := make(chan struct{})
	go func() {
		for range x.Events() {
		}
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Error("the running command's events did not end after Stop")
	}
	if _, err := sb.Exec(context.Background(), SessionRequest(spec, "true")); err == nil {
		t.Error("Exec after Stop: no error")
	}
	if err := sb.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func (s *suite) testBatchRefusesExec(t *testing.T) {
	spec := s.opts.Spec(t, "batch-exec", Sh("echo batch-ran"))
	WriteJob(t, spec)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := s.newBackend(t).Open(ctx, spec)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if _, err := sb.Exec(ctx, SessionRequest(spec, "true")); !errors.Is(err, vmrunner.ErrBatchExec) {
		t.Errorf("Exec in a batch job's sandbox: %v, want vmrunner.ErrBatchExec", err)
	}
	res, err := sb.Wait(ctx)
	if serr := sb.Stop(ctx); serr != nil {
		t.Errorf("Stop: %v", serr)
	}
	if err != nil || res.Status != vmrunner.StatusSucceeded {
		t.Fatalf("Wait: %+v, %v", res, err)
	}
	if got := ReadLog(t, spec, guest.StdoutFile); got != "batch-ran\n" {
		t.Errorf("stdout %q, want the job's own output", got)
	}
}
