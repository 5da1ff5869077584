package vm

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/guest/mux"
	"github.com/agentsandbox/agentsandbox/internal/runnertest"
	"github.com/agentsandbox/agentsandbox/microvm"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// openSession opens a session job in a fresh VM (vm tier) and stops it,
// checking that nothing is left, when the test ends.
func openSession(t testing.TB) (*Sandbox, vmrunner.StepSpec, *Backend) {
	t.Helper()
	fx := fixture(t)
	b := newBackend(t, Options{})
	spec := sessionSpec(t, fx.Dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := b.Open(ctx, spec)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	s := sb.(*Sandbox)
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
		assertClean(t, b, spec)
	})
	return s, spec, b
}

func sessionSpec(t testing.TB, runner string) vmrunner.StepSpec {
	spec := runnertest.Options{Isolation: workflow.IsolationVM}.Spec(t, "session", nil)
	spec.Runner = runner
	spec.Job.Session = true
	spec.Job.TimeoutMS = 0
	spec.Step.Resources.TimeoutMS = 0
	runnertest.WriteJob(t, spec)
	return spec
}

func execIn(t *testing.T, s *Sandbox, q guest.SessionRequest) runnertest.ExecOut {
	t.Helper()
	x, err := s.Exec(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	return runnertest.Drain(x)
}

// A VM session runs commands on request over the virtio-serial channel:
// echo twice, stdin, a background command signalled while others run,
// files through the workspace share; Stop leaves nothing behind.
func TestSessionInVM(t *testing.T) {
	s, spec, _ := openSession(t)
	if s.Accel() != "tcg" {
		t.Errorf("accel %q, want tcg", s.Accel())
	}
	for i := range 2 {
		o := execIn(t, s, runnertest.SessionRequest(spec, "echo", "hello"))
		if o.Exit == nil || o.Exit.ExitCode != 0 || o.Stdout != "hello\n" {
			t.Fatalf("echo %d: %+v", i, o)
		}
	}
	bg, err := s.Exec(context.Background(), runnertest.SessionRequest(spec, "sh", "-c", "echo waiting; trap 'echo got TERM; exit 7' TERM; while :; do sleep 0.1; done"))
	if err != nil {
		t.Fatal(err)
	}
	defer bg.Close()
	for ev := range bg.Events() {
		if ev.Type == guest.EventStdout && strings.Contains(string(ev.Data), "waiting") {
			break
		}
		if ev.Type == guest.EventExit || ev.Type == guest.EventError {
			t.Fatalf("background command ended early: %+v", ev)
		}
	}

	q := runnertest.SessionRequest(spec, "sh", "-c", "cat > in.txt; wc -c < in.txt")
	q.Stdin = true
	x, err := s.Exec(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	payload := strings.Repeat("0123456789", 30_000) // over the mux window and chunk size
	if err := x.WriteStdin([]byte(payload)); err != nil {
		t.Fatal(err)
	}
	if err := x.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	o := runnertest.Drain(x)
	x.Close()
	if o.Exit == nil || o.Exit.ExitCode != 0 || strings.TrimSpace(o.Stdout) != "300000" {
		t.Fatalf("stdin: %+v", o)
	}
	// What the command wrote is in the host's workspace (the 9p share).
	if b, err := os.ReadFile(filepath.Join(spec.Workspace, "in.txt")); err != nil || string(b) != payload {
		t.Errorf("workspace in.txt: %d bytes, %v; want the %d bytes sent", len(b), err, len(payload))
	}
	// And a file the host puts there is the guest's to read.
	if err := os.WriteFile(filepath.Join(spec.Workspace, "from-host.txt"), []byte("put by the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if o := execIn(t, s, runnertest.SessionRequest(spec, "cat", "from-host.txt")); o.Exit == nil || o.Stdout != "put by the host\n" {
		t.Errorf("read a file the host put: %+v", o)
	}

	if err := bg.Signal("SIGTERM"); err != nil {
		t.Fatal(err)
	}
	o = runnertest.Drain(bg)
	if o.Exit == nil || o.Exit.ExitCode != 7 || !strings.Contains(o.Stdout, "got TERM") {
		t.Errorf("signalled background command: %+v", o)
	}
	if u, err := s.Usage(); err != nil || u.CPUTime <= 0 {
		t.Errorf("usage %+v, %v", u, err)
	}
	if _, err := os.Lstat(filepath.Join(s.l.r.workDir, microvm.SessionSocket)); err != nil {
		t.Errorf("the session channel's socket: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped in %v", time.Since(start))
	select {
	case <-s.Done():
	default:
		t.Error("Done is open after Stop")
	}
	// The agent stopped cleanly at the host's goaway and said so.
	res, ok, err := vmrunner.ReadResult(spec.ControlDir)
	if err != nil || !ok || res.ExitCode != 0 || res.Error != "" {
		t.Errorf("result.json after Stop: %+v, %v, %v; want the agent's clean end", res, ok, err)
	}
	if _, err := os.Lstat(s.l.r.workDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("VM working directory (and its sockets) left: %v", err)
	}
	if _, err := s.Exec(context.Background(), runnertest.SessionRequest(spec, "true")); err == nil {
		t.Error("exec after Stop worked")
	}
}

// A command that is running when the session stops is killed with the VM.
func TestSessionStopWithRunningCommand(t *testing.T) {
	s, spec, _ := openSession(t)
	x, err := s.Exec(context.Background(), runnertest.SessionRequest(spec, "sleep", "600"))
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-x.Events(); ev.Type != guest.EventStarted {
		t.Fatalf("first event %+v", ev)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	o := runnertest.Drain(x)
	if o.Exit != nil && o.Exit.Signal != "SIGKILL" {
		t.Errorf("the command's end: %+v; want it killed", o)
	}
}

func TestOpenRefusesRunnersWithoutTheChannel(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("bin/microvm-run", "#!/bin/sh\nexec qemu-system-x86_64 -M microvm\n")
	write("share/microvm/hypervisor", "qemu\n")
	b := New(Options{StateDir: t.TempDir(), WorkDir: t.TempDir()})
	spec := vmrunner.StepSpec{RunID: "r", Step: workflow.Step{Name: "s"}, Runner: dir, Workspace: dir, ControlDir: dir,
		Job: guest.Job{Session: true}}
	_, err := b.Open(context.Background(), spec)
	if err == nil || !strings.Contains(err.Error(), "no session channel") || !strings.Contains(err.Error(), "render and realise") {
		t.Errorf("runner without the channel: %v", err)
	}
	write("share/microvm/hypervisor", "cloud-hypervisor\n")
	_, err = b.Open(context.Background(), spec)
	if err == nil || !strings.Contains(err.Error(), "needs hypervisor qemu") {
		t.Errorf("cloud-hypervisor runner: %v", err)
	}
	spec.Step.Hypervisor = workflow.HypervisorFirecracker
	_, err = b.Open(context.Background(), spec)
	if err == nil || !strings.Contains(err.Error(), "firecracker has no virtio-serial") {
		t.Errorf("firecracker step: %v", err)
	}
}

// BenchmarkSessionExec is the exec round trip of `true` in a warm VM
// sandbox (request on a new mux stream, fork and exec in the guest, exit
// back over the virtio-serial channel), beside the namespace backend's
// BenchmarkSessionExec; "open" is what a warm sandbox saves: opening and
// stopping the VM session.
func BenchmarkSessionExec(b *testing.B) {
	b.Run("session", func(b *testing.B) {
		s, spec, _ := openSession(b)
		q := runnertest.SessionRequest(spec, "true")
		var ds []time.Duration
		for b.Loop() {
			start := time.Now()
			x, err := s.Exec(context.Background(), q)
			if err != nil {
				b.Fatal(err)
			}
			var exit bool
			for ev := range x.Events() {
				exit = exit || ev.Type == guest.EventExit && ev.ExitCode == 0
			}
			x.Close()
			ds = append(ds, time.Since(start))
			if !exit {
				b.Fatalf("no exit 0: %v", x.(*vmrunner.ConnExec).Err())
			}
		}
		reportPercentiles(b, ds)
	})
	b.Run("open", func(b *testing.B) {
		var ds []time.Duration
		for b.Loop() {
			start := time.Now()
			s, _, _ := openSession(b)
			if err := s.Stop(context.Background()); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		reportPercentiles(b, ds)
	})
}

// reportPercentiles adds the median and the 99th percentile of d as
// ms/p50 and ms/p99.
func reportPercentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2])/float64(time.Millisecond), "ms/p50")
	b.ReportMetric(float64(d[len(d)*99/100])/float64(time.Millisecond), "ms/p99")
}

// The host reaches the session channel only as the hypervisor's socket,
// beneath the working directory, and a guest that lies on it fails the
// ping with the protocol error.
func TestDialSessionChecks(t *testing.T) {
	dir, err := os.MkdirTemp("", "asbd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, microvm.SessionSocket)
	other := filepath.Join(dir, "other.sock")
	if err := os.Symlink(other, sock); err != nil {
		t.Fatal(err)
	}
	if _, err := dialSession(dir, os.Getuid()); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("a symlink as the channel: %v", err)
	}
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// A guest that answers the hello with garbage.
			go func() {
				defer c.Close()
				io.ReadFull(c, make([]byte, mux.HeaderSize+7))
				c.Write([]byte("not a frame at all, and long enough"))
				io.Copy(io.Discard, c)
			}()
		}
	}()
	if _, err := dialSession(dir, os.Getuid()+1); err == nil || !strings.Contains(err.Error(), "not the hypervisor's") {
		t.Errorf("a channel served by another uid: %v", err)
	}
	c, err := dialSession(dir, os.Getuid())
	if err != nil {
		t.Fatal(err)
	}
	s := &Sandbox{spec: vmrunner.StepSpec{Step: workflow.Step{Name: "lying"}}, mux: mux.Client(c)}
	defer s.mux.Close()
	err = s.ping(context.Background(), 10*time.Second)
	<-s.mux.Done()
	var pe *mux.ProtocolError
	if err == nil || !errors.As(s.mux.Err(), &pe) {
		t.Errorf("ping of a lying guest: %v; session ended with %v, want a protocol error", err, s.mux.Err())
	}
}
