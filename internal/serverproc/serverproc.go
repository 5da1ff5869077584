// Package serverproc is test support for tests that run a server as a
// process (fakeserve, `agentsandbox serve`) and talk to it from another
// language's client: build it, start it, wait until it says it listens
// (or anything else), signal it, stop it with SIGTERM and see how it
// exited.
package serverproc

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// GoBuild builds pkg into dir and returns the binary's path.
func GoBuild(t testing.TB, dir, pkg string) string {
	t.Helper()
	bin := filepath.Join(dir, filepath.Base(pkg))
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build -o %s %s: %v\n%s", bin, pkg, err, out)
	}
	return bin
}

// Proc is a server process.
type Proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited, with err its Wait's
	err  error

	mu    sync.Mutex
	lines []string // its stdout and stderr so far
}

// Output is what the process has written so far, stdout and stderr.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// Pid is the process's id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// WaitFor waits until a line the process writes after its first skip
// lines matches, and returns it and the number of lines then written (the
// skip of the next WaitFor that should see only later lines). It fails
// the test after timeout, or if the process ends first.
func (p *Proc) WaitFor(t testing.TB, skip int, match func(line string) bool, timeout time.Duration) (string, int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p.mu.Lock()
		lines := p.lines
		p.mu.Unlock()
		for i := skip; i < len(lines); i++ {
			if match(lines[i]) {
				return lines[i], i + 1
			}
		}
		if p.Exited() {
			t.Fatalf("the process ended before the line waited for:\n%s", p.Output())
		}
		if time.Now().After(deadline) {
			t.Fatalf("no line waited for within %s:\n%s", timeout, p.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Start runs bin args and waits until ready (given each line of its
// stdout and stderr) says it listens; it returns the line that did. The
// process is stopped (Stop) when the test ends, if it still runs.
func Start(t testing.TB, ready func(line string) bool, bin string, args ...string) (*Proc, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	pw.Close()
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	found := make(chan string, 1)
	go func() {
		sent := false
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			if !sent && ready(sc.Text()) {
				found <- sc.Text()
				sent = true
			}
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	// A test that failed before it stopped the server stops it now, with
	// SIGTERM first: a server killed outright leaves its sandboxes' mounts
	// in the test's directory.
	t.Cleanup(func() {
		if !p.Exited() {
			p.Stop()
		}
	})
	select {
	case l := <-found:
		return p, l
	case <-p.done:
		err := p.err
		t.Fatalf("%s %s exited before it listened: %v\n%s", bin, strings.Join(args, " "), err, p.Output())
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("%s %s did not say it listens within 60s", bin, strings.Join(args, " "))
	}
	return nil, ""
}

// Stop sends SIGTERM and returns how the process exited, with its output.
func (p *Proc) Stop() (string, error) {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.Output(), p.err
	case <-time.After(90 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		return p.Output(), fmt.Errorf("did not exit within 90s of SIGTERM")
	}
}

// FreePort is a TCP address on 127.0.0.1 whose port was free a moment ago.
func FreePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// WaitForSocket waits until a unix socket accepts connections.
func WaitForSocket(t testing.TB, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing answers on %s after 30s: %v", path, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Servers are a server on a unix socket and on TCP with a bearer token,
// for clients to be tested both ways.
type Servers struct {
	Socket string // the unix socket
	Addr   string // host:port of the TCP listener
	Token  string
	// Bin is the binary that serves (the CLI, for Serve), and State its
	// state directory ("" for Fake).
	Bin, State string
	// Procs are the server processes: Serve's one, Fake's two (unix,
	// TCP).
	Procs []*Proc
}

// Fake starts fakeserve (the real manager on the fake backend,
// internal/managertest/fakeserve: it isolates nothing) on a unix socket
// and, as a second process, on TCP with token.
func Fake(t testing.TB, token string) *Servers {
	t.Helper()
	dir := t.TempDir()
	bin := GoBuild(t, dir, "github.com/agentsandbox/agentsandbox/internal/managertest/fakeserve")
	s := &Servers{Socket: filepath.Join(dir, "as.sock"), Token: token, Bin: bin}
	unix, _ := Start(t, func(l string) bool { return strings.HasPrefix(l, "listening on unix") }, bin, "-socket", s.Socket)
	tcp, line := Start(t, func(l string) bool { return strings.HasPrefix(l, "listening on tcp") }, bin,
		"-tcp", "127.0.0.1:0", "-token", token)
	s.Addr = strings.TrimPrefix(line, "listening on tcp ")
	s.Procs = []*Proc{unix, tcp}
	return s
}

// Serve builds the CLI and starts the real `agentsandbox serve` (root:
// its sandboxes are namespace jails) on a unix socket and on TCP with
// token, in a state directory of its own, with extra flags after its own.
func Serve(t testing.TB, token string, extra ...string) *Servers {
	t.Helper()
	dir := t.TempDir()
	bin := GoBuild(t, dir, "github.com/agentsandbox/agentsandbox/cmd/agentsandbox")
	s := &Servers{Socket: filepath.Join(dir, "serve.sock"), Token: token, Bin: bin, State: filepath.Join(dir, "state"), Addr: FreePort(t)}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"serve", "--state-dir", s.State, "--socket", s.Socket, "--listen", s.Addr, "--token-file", tokenFile}, extra...)
	p, _ := Start(t, func(l string) bool { return strings.HasPrefix(l, "serving on tcp") }, bin, args...)
	WaitForSocket(t, s.Socket)
	s.Procs = []*Proc{p}
	return s
}

// Stop sends every process SIGTERM and fails the test unless each exits
// with status 0.
func (s *Servers) Stop(t testing.TB) {
	t.Helper()
	for _, p := range s.Procs {
		if logs, err := p.Stop(); err != nil {
			t.Errorf("%s after SIGTERM: %v (want exit status 0)\n%s", filepath.Base(s.Bin), err, logs)
		}
	}
}
