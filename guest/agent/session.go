//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"golang.org/x/sys/unix"
)

// shutdownWait bounds how long a stopping session waits for its execs to
// report their exits after it has killed them.
const shutdownWait = 3 * time.Second

// stdinQueue is how many stdin chunks an exec holds for a command that has
// not read them yet; beyond it the connection's requests wait.
const stdinQueue = 16

// SessionOptions tune RunSession.
type SessionOptions struct {
	// NoSync skips the fsync of result.json (RunOptions.NoSync).
	NoSync bool
	// HostOnly accepts only connections from outside the agent's pid
	// namespace (SO_PEERCRED reports pid 0 for them): the host. A jail's
	// init sets it, so that a job that runs as root inside cannot drive
	// the agent; a test serving in its own pid namespace cannot.
	HostOnly bool
	// Reaper makes the session wait for any child (wait4(-1)) and hand
	// each exit to the exec that started that pid, so that orphans
	// reparented to the agent are reaped too. It is forced on when the
	// agent is PID 1; a test sets it in a child subreaper.
	Reaper bool
	// PTY says the sandbox has a devpts instance of its own at /dev/pts
	// (the jail's, the VM guest's): only then is an exec with a pty
	// run. The fake backend's agent, on the host, refuses it, so that no
	// pty is ever the host's.
	PTY bool
	// Ready, when set, is called once the socket listens (or the port
	// is open).
	Ready func()
	// Port, when set, is the name of the virtio-serial port to serve on
	// instead of the control directory's socket: a VM's agent
	// (session_port.go). The session then ends at the host's goaway too.
	Port string
}

// RunSession serves the session protocol (guest/session.go) for the
// session job in controlDir/job.json: it listens on
// controlDir/guest.SessionSocket (mode 0600) and runs one command per
// connection until ctx is done. Then it kills every command still running
// (SIGKILL to its process group), waits briefly for their exits to be
// reported, closes the socket and writes result.json: ExitCode 0 and no
// Error when the session was served and stopped cleanly, ExitCode -1 and
// Error when it could not be (no job, not a session job, no socket).
// Started and Finished are the session's lifetime. As RunJobWith, the
// error is non-nil only when result.json could not be written.
//
// Each request is checked once (SessionRequest.Check) and an exec runs as
// the Job SessionRequest.ExecJob makes of it, through the same process
// runner as a batch job (startProc): in a new process group, as the
// request's UID and GID, with exactly the request's Env and timeout; when
// it ends, what it left in its process group is killed. Output is not
// copied to console; the session's own errors are.
func RunSession(ctx context.Context, controlDir string, console io.Writer, o SessionOptions) (guest.Result, error) {
	if console == nil {
		console = io.Discard
	}
	res := guest.Result{Version: guest.ProtocolVersion, ExitCode: -1, Started: time.Now().UTC()}
	err := serveSession(ctx, controlDir, console, o, &res)
	res.Finished = time.Now().UTC()
	if err != nil {
		res.ExitCode = -1
		res.Error = err.Error()
		fmt.Fprintf(console, "%s %v\n", guest.ConsoleErrorLine, err)
	} else {
		res.ExitCode = 0
	}
	if werr := writeResult(controlDir, res, !o.NoSync); werr != nil {
		return res, werr
	}
	return res, nil
}

func serveSession(ctx context.Context, controlDir string, console io.Writer, o SessionOptions, res *guest.Result) error {
	job, err := ReadJob(controlDir)
	res.Step = job.Step
	if err != nil {
		return err
	}
	if !job.Session {
		return errors.New("job.json is not a session job (session is false): run it with RunJob")
	}
	if o.Port != "" {
		srv := newServer(job, console, o.Reaper || os.Getpid() == 1)
		srv.pty = o.PTY
		defer srv.reap.run()()
		err := srv.servePort(ctx, o.Port, console, o.Ready)
		srv.shutdown()
		return err
	}
	sockPath := filepath.Join(controlDir, guest.SessionSocket)
	if err := os.Remove(sockPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale session socket: %w", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sockPath, Net: "unix"})
	if err != nil {
		return fmt.Errorf("listen on the session socket: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(sockPath, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("make the session socket root-only: %w", err)
	}
	srv := newServer(job, console, o.Reaper || os.Getpid() == 1)
	srv.pty = o.PTY
	defer srv.reap.run()()

	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		pause := time.Duration(0)
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				// Out of descriptors or memory: say so once, back off and
				// go on, so the session is not left deaf.
				if pause == 0 {
					fmt.Fprintf(console, "%s accept on the session socket: %v\n", guest.ConsoleErrorLine, err)
				}
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				time.Sleep(pause)
				continue
			}
			pause = 0
			if o.HostOnly && !fromHost(c) {
				c.Close()
				continue
			}
			srv.serveConn(c)
		}
	}()
	if o.Ready != nil {
		o.Ready()
	}
	<-ctx.Done()
	ln.Close()
	<-accepted
	srv.shutdown()
	return nil
}

// fromHost says the peer is outside the agent's pid namespace: the kernel
// reports its pid as 0 here.
func fromHost(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return false
	}
	return cred.Pid == 0
}

// server runs the execs of one session.
type server struct {
	job     guest.Job
	console io.Writer
	reap    *reaper
	pty     bool // SessionOptions.PTY

	mu     sync.Mutex
	conns  map[io.Closer]bool
	groups map[int]bool // process groups of running execs
	closed bool
	wg     sync.WaitGroup
}

func newServer(job guest.Job, console io.Writer, reaperMode bool) *server {
	return &server{
		job: job, console: console,
		reap:   newReaper(reaperMode),
		conns:  map[io.Closer]bool{},
		groups: map[int]bool{},
	}
}

// serveConn runs one connection (a unix socket's, or a stream of the
// VM's port) in its own goroutine.
func (s *server) serveConn(c io.ReadWriteCloser) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return
	}
	s.conns[c] = true
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
		s.handle(c)
	}()
}

// shutdown kills every running exec, waits (bounded) for the connections to
// finish reporting, then closes what is left.
func (s *server) shutdown() {
	s.mu.Lock()
	s.closed = true
	for pgid := range s.groups {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(shutdownWait):
	}
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	<-done
}

// connWriter sends events on one connection; a failed write drops the rest.
type connWriter struct {
	mu  sync.Mutex
	enc *guest.SessionEncoder
	err error
}

func (w *connWriter) send(ev guest.SessionEvent) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.err = w.enc.Encode(ev)
	return w.err
}

// handle serves one connection: a ping, or one exec.
func (s *server) handle(c io.ReadWriter) {
	dec := guest.NewSessionDecoder(c)
	out := &connWriter{enc: guest.NewSessionEncoder(c)}
	var q guest.SessionRequest
	if err := dec.Decode(&q); err != nil {
		if !errors.Is(err, io.EOF) {
			_ = out.send(guest.SessionEvent{Type: guest.EventError, Error: err.Error()})
		}
		return
	}
	if err := q.Check(); err != nil {
		_ = out.send(guest.SessionEvent{Type: guest.EventError, Error: err.Error()})
		return
	}
	switch q.Op {
	case guest.OpPing:
		_ = out.send(guest.SessionEvent{Type: guest.EventPong})
	case guest.OpExec:
		s.exec(q, dec, out)
	default:
		_ = out.send(guest.SessionEvent{Type: guest.EventError, Error: fmt.Sprintf("the first request of a connection must be %q or %q, not %q", guest.OpExec, guest.OpPing, q.Op)})
	}
}

// exec runs one command for the connection.
func (s *server) exec(q guest.SessionRequest, dec *guest.SessionDecoder, out *connWriter) {
	if q.PTY != nil && !s.pty {
		_ = out.send(guest.SessionEvent{Type: guest.EventError, Error: "a pty is not offered by this sandbox: it has no devpts of its own (the fake backend runs on the host's)"})
		return
	}
	p, err := startProc(s.reap, q.ExecJob(s.job), procIO{
		Stdin:  q.Stdin,
		PTY:    q.PTY,
		Stdout: func(r io.Reader) error { pump(r, guest.EventStdout, out); return nil },
		Stderr: func(r io.Reader) error { pump(r, guest.EventStderr, out); return nil },
	})
	if err != nil {
		_ = out.send(guest.SessionEvent{Type: guest.EventError, Error: err.Error()})
		return
	}
	s.mu.Lock()
	s.groups[p.pid] = true
	if s.closed { // shutdown began while we started it
		p.killGroup()
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.groups, p.pid)
		s.mu.Unlock()
	}()
	_ = out.send(guest.SessionEvent{Type: guest.EventStarted, PID: p.pid})

	// The connection's further requests: stdin, close_stdin, signal. When
	// it ends before the exit (the host went away, or sent garbage), the
	// command's process group is killed.
	stdin := newStdinWriter(p.stdin)
	defer stdin.abort()
	hostGone := make(chan struct{})
	go func() {
		defer close(hostGone)
		defer stdin.close()
		for {
			var r guest.SessionRequest
			if err := dec.Decode(&r); err != nil {
				return
			}
			if err := r.Check(); err != nil {
				return
			}
			switch r.Op {
			case guest.OpStdin:
				stdin.write(r.Data)
			case guest.OpCloseStdin:
				stdin.close()
			case guest.OpResize:
				if err := p.resize(*r.PTY); err != nil {
					fmt.Fprintf(s.console, "%s exec %d: resize: %v\n", guest.ConsoleErrorLine, p.pid, err)
				}
			case guest.OpSignal:
				if sig, ok := SignalNumber(r.Signal); ok {
					p.signal(sig)
				} else {
					fmt.Fprintf(s.console, "%s exec %d: unknown signal %q ignored\n", guest.ConsoleErrorLine, p.pid, r.Signal)
				}
			default:
				return
			}
		}
	}()

	end := p.wait(context.Background(), hostGone)
	if end.WaitErr != nil {
		_ = out.send(guest.SessionEvent{Type: guest.EventError, Error: fmt.Sprintf("wait for pid %d: %v", p.pid, end.WaitErr)})
		return
	}
	_ = out.send(guest.SessionEvent{Type: guest.EventExit, ExitCode: end.ExitCode, Signal: end.Signal, TimedOut: end.TimedOut, Rusage: end.Rusage})
}

// pump sends what r yields as events of type typ, at most
// guest.MaxSessionChunk bytes each. When the host stops taking them it
// keeps reading, so the command is never blocked on a full pipe by a host
// that went away.
func pump(r io.Reader, typ string, out *connWriter) {
	buf := make([]byte, guest.MaxSessionChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_ = out.send(guest.SessionEvent{Type: typ, Data: append([]byte(nil), buf[:n]...)})
		}
		if err != nil {
			return
		}
	}
}

// stdinWriter feeds a command's stdin from the connection without letting a
// command that does not read it hold up the connection's signals: chunks
// queue (stdinQueue of them) for a goroutine that writes them. write and
// close are called from the connection's reader only; abort may be called
// from anywhere.
type stdinWriter struct {
	w      *os.File // nil: the command reads /dev/null
	closed bool
	queue  chan []byte
}

func newStdinWriter(w *os.File) *stdinWriter {
	s := &stdinWriter{w: w, queue: make(chan []byte, stdinQueue)}
	go func() {
		ok := w != nil
		for b := range s.queue {
			if ok {
				if _, err := w.Write(b); err != nil {
					ok = false // the command closed its stdin: drop the rest
				}
			}
		}
		if w != nil {
			w.Close()
		}
	}()
	return s
}

// write queues b; after close it is dropped.
func (s *stdinWriter) write(b []byte) {
	if !s.closed {
		s.queue <- b
	}
}

// close ends the command's stdin once the queue is written.
func (s *stdinWriter) close() {
	if !s.closed {
		s.closed = true
		close(s.queue)
	}
}

// abort closes the pipe at once, so a write blocked on a command that no
// longer reads fails and the writer ends.
func (s *stdinWriter) abort() {
	if s.w != nil {
		s.w.Close()
	}
}
