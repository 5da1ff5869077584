package vmrunner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/guest/agent"
)

// ConnExec is one command of a session: one connection of the session
// protocol (guest/session.go), a unix socket connection to a jail's agent
// or a guest/mux stream of a VM's session channel. Both backends' execs are
// one.
type ConnExec struct {
	c      io.ReadWriteCloser
	mu     sync.Mutex // serialises frames to the agent
	enc    *guest.SessionEncoder
	events chan guest.SessionEvent

	closeOnce sync.Once
	closed    chan struct{}
	err       error // set before events is closed
}

var _ Exec = (*ConnExec)(nil)

// StartExec sends the exec request q (Op is set to exec) on c, which it
// then owns (and closes on an error), and reads the command's events from
// it. When ctx is done before the exit, c is closed and the agent kills the
// command's process group; Close does the same.
func StartExec(ctx context.Context, c io.ReadWriteCloser, q guest.SessionRequest) (*ConnExec, error) {
	q.Op = guest.OpExec
	if err := q.Check(); err != nil {
		c.Close()
		return nil, err
	}
	x := &ConnExec{c: c, enc: guest.NewSessionEncoder(c), events: make(chan guest.SessionEvent, 16), closed: make(chan struct{})}
	// Watch ctx from the start: a guest that stopped reading holds the
	// request's write.
	if ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				x.Close()
			case <-x.closed:
			}
		}()
	}
	if err := x.send(q); err != nil {
		x.Close()
		return nil, fmt.Errorf("send the exec request: %w", err)
	}
	go x.read(guest.NewSessionDecoder(c))
	return x, nil
}

// Events delivers the command's events in order; it is closed after the
// "exit" or "error" event, or when the connection ended without one (Err
// then says why). Read it to the end: the agent waits while it is full.
func (x *ConnExec) Events() <-chan guest.SessionEvent { return x.events }

// Err is, once Events is closed, why the stream ended without an "exit" or
// "error" event; nil when it ended with one.
func (x *ConnExec) Err() error { return x.err }

func (x *ConnExec) read(dec *guest.SessionDecoder) {
	defer close(x.events)
	defer x.Close()
	for {
		var ev guest.SessionEvent
		if err := dec.Decode(&ev); err != nil {
			select {
			case <-x.closed:
				x.err = errors.New("exec closed before the command exited")
			default:
				if errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				x.err = fmt.Errorf("the agent's connection ended before the command's exit (did the sandbox stop?): %w", err)
			}
			return
		}
		select {
		case x.events <- ev:
		case <-x.closed:
			x.err = errors.New("exec closed before the command exited")
			return
		}
		if ev.Type == guest.EventExit || ev.Type == guest.EventError {
			return
		}
	}
}

func (x *ConnExec) send(q guest.SessionRequest) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.enc.Encode(q)
}

// WriteStdin sends b to the command's stdin (the request must have had
// Stdin set), in pieces of at most guest.MaxSessionChunk.
func (x *ConnExec) WriteStdin(b []byte) error {
	for len(b) > 0 {
		n := min(len(b), guest.MaxSessionChunk)
		if err := x.send(guest.SessionRequest{Op: guest.OpStdin, Data: b[:n]}); err != nil {
			return fmt.Errorf("write the command's stdin: %w", err)
		}
		b = b[n:]
	}
	return nil
}

// CloseStdin ends the command's stdin once what was written is read.
func (x *ConnExec) CloseStdin() error {
	if err := x.send(guest.SessionRequest{Op: guest.OpCloseStdin}); err != nil {
		return fmt.Errorf("close the command's stdin: %w", err)
	}
	return nil
}

// Resize sets the size of the command's pty (the request must have had
// PTY set).
func (x *ConnExec) Resize(size guest.PTYSize) error {
	if err := x.send(guest.SessionRequest{Op: guest.OpResize, PTY: &size}); err != nil {
		return fmt.Errorf("resize the command's pty: %w", err)
	}
	return nil
}

// Signal sends a signal ("SIGTERM", "SIGINT", "SIGRTMIN+1", ...) to the
// command's process group.
func (x *ConnExec) Signal(name string) error {
	if _, ok := agent.SignalNumber(name); !ok {
		return fmt.Errorf("signal %q: not a signal name; use one such as SIGTERM, SIGINT, SIGKILL or SIGRTMIN+1", name)
	}
	if err := x.send(guest.SessionRequest{Op: guest.OpSignal, Signal: name}); err != nil {
		return fmt.Errorf("send %s to the command: %w", name, err)
	}
	return nil
}

// Close drops the connection; a command still running is killed with its
// process group. Events is closed soon after.
func (x *ConnExec) Close() error {
	x.closeOnce.Do(func() {
		close(x.closed)
		x.c.Close()
	})
	return nil
}
