//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"golang.org/x/sys/unix"
)

// serve starts a session on a fresh control directory (short, for the
// socket path's 108-byte limit) and stops it when the test ends, checking
// result.json.
func serve(t *testing.T, o SessionOptions) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "asbs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	job := guest.Job{Version: guest.ProtocolVersion, Step: "session", Session: true, Workdir: "/"}
	b, _ := json.Marshal(job)
	if err := os.WriteFile(filepath.Join(dir, guest.JobFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	o.Ready = func() { close(ready) }
	type ret struct {
		res guest.Result
		err error
	}
	done := make(chan ret, 1)
	go func() {
		res, err := RunSession(ctx, dir, io.Discard, o)
		done <- ret{res, err}
	}()
	select {
	case <-ready:
	case r := <-done:
		t.Fatalf("RunSession ended before it listened: %+v, %v", r.res, r.err)
	}
	t.Cleanup(func() {
		cancel()
		r := <-done
		if r.err != nil || r.res.ExitCode != 0 || r.res.Error != "" {
			t.Errorf("RunSession = %+v, %v; want exit 0", r.res, r.err)
		}
		if _, err := os.Stat(filepath.Join(dir, guest.ResultFile)); err != nil {
			t.Errorf("no result.json after the session: %v", err)
		}
		if _, err := os.Lstat(filepath.Join(dir, guest.SessionSocket)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("session socket left behind: %v", err)
		}
	})
	return dir
}

type client struct {
	c   io.ReadWriteCloser
	enc *guest.SessionEncoder
	dec *guest.SessionDecoder
}

func dial(t *testing.T, dir string) *client {
	t.Helper()
	c, err := net.Dial("unix", filepath.Join(dir, guest.SessionSocket))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{c: c, enc: guest.NewSessionEncoder(c), dec: guest.NewSessionDecoder(c)}
}

func (c *client) send(t *testing.T, q guest.SessionRequest) {
	t.Helper()
	if err := c.enc.Encode(q); err != nil {
		t.Fatal(err)
	}
}

// outcome is an exec's events folded up.
type outcome struct {
	pid            int
	stdout, stderr string
	exit           *guest.SessionEvent
	err            string
	order          []string
}

// collect reads events until exit, error or the end of the connection.
func (c *client) collect(t *testing.T) outcome {
	t.Helper()
	var o outcome
	for {
		var ev guest.SessionEvent
		if err := c.dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return o
			}
			t.Fatalf("decode event: %v", err)
		}
		o.order = append(o.order, ev.Type)
		switch ev.Type {
		case guest.EventStarted:
			o.pid = ev.PID
		case guest.EventStdout:
			if len(ev.Data) > guest.MaxSessionChunk {
				t.Errorf("stdout chunk of %d bytes", len(ev.Data))
			}
			o.stdout += string(ev.Data)
		case guest.EventStderr:
			o.stderr += string(ev.Data)
		case guest.EventExit:
			o.exit = &ev
			return o
		case guest.EventError:
			o.err = ev.Error
			return o
		}
	}
}

func selfExec(command ...string) guest.SessionRequest {
	return guest.SessionRequest{
		Op: guest.OpExec, Command: command, Env: []string{"PATH=/usr/bin:/bin"},
		Workdir: "/", UID: os.Getuid(), GID: os.Getgid(),
	}
}

func run1(t *testing.T, dir string, q guest.SessionRequest) outcome {
	t.Helper()
	c := dial(t, dir)
	c.send(t, q)
	return c.collect(t)
}

func TestSessionPing(t *testing.T) {
	dir := serve(t, SessionOptions{})
	fi, err := os.Lstat(filepath.Join(dir, guest.SessionSocket))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("session socket mode %v, want a socket with 0600", fi.Mode())
	}
	c := dial(t, dir)
	c.send(t, guest.SessionRequest{Op: guest.OpPing})
	var ev guest.SessionEvent
	if err := c.dec.Decode(&ev); err != nil || ev.Type != guest.EventPong {
		t.Fatalf("ping: %+v, %v", ev, err)
	}
}

func TestSessionExecExitAndOutput(t *testing.T) {
	dir := serve(t, SessionOptions{})
	o := run1(t, dir, selfExec("sh", "-c", "echo hi; echo oops >&2; exit 3"))
	if o.exit == nil || o.exit.ExitCode != 3 || o.exit.Signal != "" || o.exit.TimedOut {
		t.Fatalf("outcome %+v, want exit 3", o)
	}
	if o.stdout != "hi\n" || o.stderr != "oops\n" {
		t.Errorf("stdout %q stderr %q", o.stdout, o.stderr)
	}
	if o.order[0] != guest.EventStarted || o.pid <= 0 {
		t.Errorf("first event %q pid %d, want started with a pid", o.order[0], o.pid)
	}
}

func TestSessionWorkdirAndEnv(t *testing.T) {
	dir := serve(t, SessionOptions{})
	q := selfExec("sh", "-c", "pwd; echo $FOO")
	q.Workdir = "/tmp"
	q.Env = append(q.Env, "FOO=bar")
	o := run1(t, dir, q)
	if o.exit == nil || o.exit.ExitCode != 0 || o.stdout != "/tmp\nbar\n" {
		t.Fatalf("outcome %+v", o)
	}
	// A relative workdir is under the workspace, which this host lacks.
	q.Workdir = "sub"
	o = run1(t, dir, q)
	if !strings.Contains(o.err, filepath.Join(guest.WorkspaceMount, "sub")) {
		t.Errorf("relative workdir: error %q, want it to name %s/sub", o.err, guest.WorkspaceMount)
	}
}

func TestSessionLargeOutputChunked(t *testing.T) {
	dir := serve(t, SessionOptions{})
	o := run1(t, dir, selfExec("sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x"))
	if o.exit == nil || o.exit.ExitCode != 0 || len(o.stdout) != 300000 || strings.Trim(o.stdout, "x") != "" {
		t.Fatalf("got %d bytes of stdout, exit %+v", len(o.stdout), o.exit)
	}
}

func TestSessionStdin(t *testing.T) {
	dir := serve(t, SessionOptions{})
	c := dial(t, dir)
	q := selfExec("cat")
	q.Stdin = true
	c.send(t, q)
	big := bytes.Repeat([]byte("0123456789abcdef"), 3*guest.MaxSessionChunk/16+5)
	for b := big; len(b) > 0; {
		n := min(len(b), guest.MaxSessionChunk)
		c.send(t, guest.SessionRequest{Op: guest.OpStdin, Data: b[:n]})
		b = b[n:]
	}
	c.send(t, guest.SessionRequest{Op: guest.OpCloseStdin})
	o := c.collect(t)
	if o.exit == nil || o.exit.ExitCode != 0 || o.stdout != string(big) {
		t.Fatalf("cat: %d of %d bytes back, exit %+v, error %q", len(o.stdout), len(big), o.exit, o.err)
	}
}

func TestSessionNoStdinIsDevNull(t *testing.T) {
	dir := serve(t, SessionOptions{})
	o := run1(t, dir, selfExec("sh", "-c", "cat; echo done"))
	if o.exit == nil || o.exit.ExitCode != 0 || o.stdout != "done\n" {
		t.Fatalf("outcome %+v", o)
	}
}

func TestSessionTimeout(t *testing.T) {
	dir := serve(t, SessionOptions{})
	q := selfExec("sh", "-c", "trap '' TERM; sleep 30")
	q.TimeoutMS = 200
	start := time.Now()
	o := run1(t, dir, q)
	if o.exit == nil || !o.exit.TimedOut || o.exit.Signal != "SIGKILL" {
		t.Fatalf("outcome %+v, want timed out and killed", o)
	}
	if d := time.Since(start); d > guest.KillGrace+3*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestSessionSignal(t *testing.T) {
	dir := serve(t, SessionOptions{})
	c := dial(t, dir)
	c.send(t, selfExec("sh", "-c", "echo up; sleep 30"))
	var ev guest.SessionEvent
	for ev.Type != guest.EventStdout {
		if err := c.dec.Decode(&ev); err != nil {
			t.Fatal(err)
		}
	}
	c.send(t, guest.SessionRequest{Op: guest.OpSignal, Signal: "SIGTERM"})
	o := c.collect(t)
	if o.exit == nil || o.exit.Signal != "SIGTERM" || o.exit.TimedOut {
		t.Fatalf("outcome %+v, want killed by SIGTERM", o)
	}
}

func TestSessionBadRequests(t *testing.T) {
	dir := serve(t, SessionOptions{})
	for name, q := range map[string]guest.SessionRequest{
		"stdin first":   {Op: guest.OpStdin},
		"no command":    {Op: guest.OpExec},
		"not found":     selfExec("no-such-command-here"),
		"no PATH":       {Op: guest.OpExec, Command: []string{"true"}, UID: os.Getuid(), GID: os.Getgid()},
		"unknown op":    {Op: "launch"},
		"negative uid":  {Op: guest.OpExec, Command: []string{"true"}, UID: -1},
		"bad env entry": {Op: guest.OpExec, Command: []string{"/bin/true"}, Env: []string{"NOEQUALS"}, UID: os.Getuid(), GID: os.Getgid()},
	} {
		o := run1(t, dir, q)
		if o.err == "" || o.exit != nil {
			t.Errorf("%s: outcome %+v, want an error event", name, o)
		}
	}
	c := dial(t, dir)
	if _, err := c.c.Write([]byte("{\"op\":\"exec\",\"bogus\":1}\n")); err != nil {
		t.Fatal(err)
	}
	if o := c.collect(t); o.err == "" {
		t.Errorf("unknown field: outcome %+v, want an error", o)
	}
}

// TestSessionConcurrent runs several execs at once, each with its own
// output, and checks nothing crosses.
func TestSessionConcurrent(t *testing.T) {
	dir := serve(t, SessionOptions{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := run1(t, dir, selfExec("sh", "-c", "sleep 0.2; echo "+strconv.Itoa(i)+"; exit "+strconv.Itoa(i)))
			if o.exit == nil || o.exit.ExitCode != i || o.stdout != strconv.Itoa(i)+"\n" {
				t.Errorf("exec %d: %+v", i, o)
			}
		}()
	}
	wg.Wait()
}

// TestSessionDisconnectKillsGroup: a host that goes away mid-exec takes the
// command's whole process group with it.
func TestSessionDisconnectKillsGroup(t *testing.T) {
	dir := serve(t, SessionOptions{})
	c := dial(t, dir)
	c.send(t, selfExec("sh", "-c", "sleep 30 & echo $!; wait"))
	var pid, child int
	for child == 0 {
		var ev guest.SessionEvent
		if err := c.dec.Decode(&ev); err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case guest.EventStarted:
			pid = ev.PID
		case guest.EventStdout:
			child, _ = strconv.Atoi(strings.TrimSpace(string(ev.Data)))
		}
	}
	c.c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range []int{pid, child} {
		for alive(p) {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d still runs after the host disconnected", p)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// alive says pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// TestSessionStopKillsExecs: stopping the session kills what runs; the
// exec sees its exit.
func TestSessionStopKillsExecs(t *testing.T) {
	dir, err := os.MkdirTemp("", "asbs")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	b, _ := json.Marshal(guest.Job{Version: guest.ProtocolVersion, Session: true, Workdir: "/"})
	os.WriteFile(filepath.Join(dir, guest.JobFile), b, 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		res, err := RunSession(ctx, dir, io.Discard, SessionOptions{Ready: func() { close(ready) }})
		if err == nil && res.ExitCode != 0 {
			err = errors.New(res.Error)
		}
		done <- err
	}()
	<-ready
	c := dial(t, dir)
	c.send(t, selfExec("sleep", "30"))
	var ev guest.SessionEvent
	if err := c.dec.Decode(&ev); err != nil || ev.Type != guest.EventStarted {
		t.Fatalf("%+v %v", ev, err)
	}
	cancel()
	o := c.collect(t)
	if o.exit == nil || o.exit.Signal != "SIGKILL" {
		t.Errorf("exec after stop: %+v, want killed", o)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestSessionRefusesOneShotJob(t *testing.T) {
	dir := writeJob(t, selfJob(t, "true"))
	res, err := RunSession(context.Background(), dir, io.Discard, SessionOptions{})
	if err != nil || res.ExitCode != -1 || !strings.Contains(res.Error, "not a session") {
		t.Fatalf("RunSession on a one-shot job: %+v, %v", res, err)
	}
	// And RunJob refuses a session job instead of running nothing.
	dir = writeJob(t, guest.Job{Version: guest.ProtocolVersion, Session: true, Workdir: "/"})
	res, err = RunJob(context.Background(), dir, io.Discard)
	if err != nil || res.Error == "" || !strings.Contains(res.Error, "session") {
		t.Fatalf("RunJob on a session job: %+v, %v", res, err)
	}
}

func TestSessionHostOnly(t *testing.T) {
	dir := serve(t, SessionOptions{HostOnly: true})
	// This test is in the agent's own pid namespace: it is no host.
	c := dial(t, dir)
	_ = c.enc.Encode(guest.SessionRequest{Op: guest.OpPing}) // may fail: the agent hung up
	var ev guest.SessionEvent
	if err := c.dec.Decode(&ev); err == nil {
		t.Fatalf("a peer in the agent's pid namespace got %+v", ev)
	}
}

func TestSignalNumber(t *testing.T) {
	for s := syscall.Signal(1); s <= 64; s++ {
		if s == 32 || s == 33 {
			continue
		}
		n, ok := SignalNumber(SignalName(s))
		if !ok || n != s {
			t.Errorf("SignalNumber(%q) = %d, %v; want %d", SignalName(s), n, ok, s)
		}
	}
	if _, ok := SignalNumber("SIGNOPE"); ok {
		t.Error("SIGNOPE known")
	}
}

// reaperChildEnv runs TestSessionReaper's child: a subreaper serving a
// session in reaper mode.
const reaperChildEnv = "AGENTSANDBOX_TEST_REAPER_DIR"

// TestSessionReaper runs a session the way PID 1 does (wait4(-1) for every
// child, exits dispatched by pid) in a child process made a subreaper, so
// that orphans come to it: an exec that leaves a background process gets
// its own exit status, and the orphan is reaped, not left a zombie.
func TestSessionReaper(t *testing.T) {
	if dir := os.Getenv(reaperChildEnv); dir != "" {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := RunSession(ctx, dir, io.Discard, SessionOptions{Reaper: true, Ready: func() { os.Stdout.WriteString("ready\n") }}); err != nil {
			t.Fatal(err)
		}
		return
	}
	dir, err := os.MkdirTemp("", "asbr")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	b, _ := json.Marshal(guest.Job{Version: guest.ProtocolVersion, Session: true, Workdir: "/"})
	os.WriteFile(filepath.Join(dir, guest.JobFile), b, 0o600)
	cmd := exec.Command(os.Args[0], "-test.run=^TestSessionReaper$", "-test.v")
	cmd.Env = append(os.Environ(), reaperChildEnv+"="+dir)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Process.Kill(); cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && lines.Text() != "ready" {
	}
	if lines.Text() != "ready" {
		t.Fatalf("the child session never got ready (%v)", lines.Err())
	}
	go io.Copy(io.Discard, stdout)

	// The shell exits 7 at once; its sleeper lives on, an orphan, and its
	// pid comes out on stdout. Several at once, to race the dispatch.
	var wg sync.WaitGroup
	orphans := make(chan int, 6)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := selfExec("sh", "-c", "sleep 0.3 >/dev/null 2>&1 & echo $!; exit "+strconv.Itoa(i))
			o := run1(t, dir, q)
			if o.exit == nil || o.exit.ExitCode != i {
				t.Errorf("exec %d: %+v", i, o)
				return
			}
			p, _ := strconv.Atoi(strings.TrimSpace(o.stdout))
			orphans <- p
		}()
	}
	wg.Wait()
	close(orphans)
	deadline := time.Now().Add(5 * time.Second)
	for p := range orphans {
		for {
			_, err := os.Stat("/proc/" + strconv.Itoa(p))
			if errors.Is(err, os.ErrNotExist) {
				break // reaped
			}
			if time.Now().After(deadline) {
				t.Fatalf("orphan %d not reaped (still in /proc)", p)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// BenchmarkSessionExec is one exec of `true` through the agent's server in
// this process (no jail): connect, request, fork and exec, events to the
// exit. The namespace backend's benchmark adds the jail around it.
func BenchmarkSessionExec(b *testing.B) {
	dir, err := os.MkdirTemp("", "asbb")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	j, _ := json.Marshal(guest.Job{Version: guest.ProtocolVersion, Session: true, Workdir: "/"})
	os.WriteFile(filepath.Join(dir, guest.JobFile), j, 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		RunSession(ctx, dir, io.Discard, SessionOptions{Ready: func() { close(ready) }})
	}()
	<-ready
	defer func() { cancel(); <-done }()
	q := selfExec("/bin/true")
	for b.Loop() {
		c, err := net.Dial("unix", filepath.Join(dir, guest.SessionSocket))
		if err != nil {
			b.Fatal(err)
		}
		guest.NewSessionEncoder(c).Encode(q)
		d := guest.NewSessionDecoder(c)
		for {
			var ev guest.SessionEvent
			if err := d.Decode(&ev); err != nil {
				b.Fatal(err)
			}
			if ev.Type == guest.EventExit {
				break
			}
		}
		c.Close()
	}
}
