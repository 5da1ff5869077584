package sandboxes

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner"
)

// execState is one command of a sandbox, running or ended.
type execState struct {
	id       string
	req      ExecRequest // without its stdin, which is not kept
	argv     []string
	decision string // the policy decision that admitted it
	started  time.Time
	x        vmrunner.Exec
	span     trace.Span // ended by recordExec
	store    *record.Store

	mu      sync.Mutex
	streams [2]outStream // stdout, stderr (output.go)
	exit    *ExitStatus
	failed  string        // an error event: it never ran
	changed chan struct{} // closed and replaced on every change
	// pinned is set while a foreground reader reads: pin are the offsets
	// it has had, and the pump waits (moved, broadcast when they move)
	// rather than drop a byte past them that is not on disk.
	pinned   bool
	pin      [2]int64
	moved    *sync.Cond
	unpinned chan struct{} // closed once no pinned reader can come
	done     chan struct{} // closed once the exit (or error) is in
	recorded chan struct{} // closed once its record entry is written

	diskMu sync.RWMutex // the streams' spool and path (output.go)

	// stdinMu orders the caller's writes to an open stdin (StdinOpen);
	// stdinOpen is cleared once it is closed.
	stdinMu   sync.Mutex
	stdinOpen bool
}

const (
	stdout = 0
	stderr = 1
)

// newExecState is an exec whose output goes to store, up to limit bytes
// of each stream. A foreground exec starts pinned at offset 0, before its
// pump starts.
func newExecState(id string, limit int64, store *record.Store, foreground bool) *execState {
	x := &execState{id: id, store: store, pinned: foreground,
		changed: make(chan struct{}), unpinned: make(chan struct{}), done: make(chan struct{}), recorded: make(chan struct{})}
	x.moved = sync.NewCond(&x.mu)
	x.streams[stdout] = outStream{name: EventStdout, limit: limit}
	x.streams[stderr] = outStream{name: EventStderr, limit: limit}
	if !foreground {
		close(x.unpinned)
	}
	return x
}

func (x *execState) running() bool {
	select {
	case <-x.done:
		return false
	default:
		return true
	}
}

// kill ends the command, and lets go of a pinned reader: a sandbox being
// stopped does not wait for a client that does not read.
func (x *execState) kill() {
	if sx := x.session(); sx != nil {
		_ = sx.Close()
	}
	x.unpin()
}

// session is the command's connection to the agent while it runs, nil
// after.
func (x *execState) session() vmrunner.Exec {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.x
}

// unpin ends the hold of the foreground reader, if there was one.
func (x *execState) unpin() {
	x.mu.Lock()
	defer x.mu.Unlock()
	select {
	case <-x.unpinned:
		return
	default:
	}
	x.pinned = false
	close(x.unpinned)
	x.moved.Broadcast()
}

// notify wakes the readers; x.mu is held.
func (x *execState) notify() {
	close(x.changed)
	x.changed = make(chan struct{})
}

func (x *execState) info(sandbox string) ExecInfo {
	x.mu.Lock()
	defer x.mu.Unlock()
	return ExecInfo{ID: x.id, Sandbox: sandbox, Request: x.req, Started: x.started,
		Running: x.exit == nil && x.failed == "", Exit: x.exit,
		StdoutBytes: x.streams[stdout].total(), StderrBytes: x.streams[stderr].total()}
}

// add takes the next bytes of stream i: on disk as far as its limit, in
// the ring, after waiting for a pinned reader that would lose bytes
// otherwise. Only the pump calls it.
func (x *execState) add(i int, p []byte) {
	s := &x.streams[i]
	x.mu.Lock()
	kept, failed := s.kept, s.diskErr != nil
	x.mu.Unlock()
	var err error
	if !failed {
		kept, err = x.toDisk(i, kept, p)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	s.kept = kept
	if err != nil {
		s.diskErr = err
	}
	for {
		drop := s.ring.startAfter(len(p)) // bytes before it leave the ring
		if !x.pinned || x.pin[i] >= drop || s.kept >= drop {
			break
		}
		x.moved.Wait()
	}
	s.ring.write(p)
	x.notify()
}

// pump reads the command's events until its end.
func (x *execState) pump() {
	sx := x.session()
	for ev := range sx.Events() {
		switch ev.Type {
		case guest.EventStdout:
			x.add(stdout, ev.Data)
			continue
		case guest.EventStderr:
			x.add(stderr, ev.Data)
			continue
		}
		x.mu.Lock()
		switch ev.Type {
		case guest.EventExit:
			x.exit = &ExitStatus{ExitCode: ev.ExitCode, Signal: ev.Signal, TimedOut: ev.TimedOut,
				DurationMS: time.Since(x.started).Milliseconds(),
				CPUTimeNs:  (ev.Rusage.UserMS + ev.Rusage.SystemMS) * int64(time.Millisecond),
				MaxRSS:     ev.Rusage.MaxRSSKiB << 10}
		case guest.EventError:
			x.failed = ev.Error
		}
		x.notify()
		x.mu.Unlock()
	}
	x.mu.Lock()
	if x.exit == nil && x.failed == "" {
		x.failed = "the sandbox's agent went away before the command ended"
	}
	close(x.done)
	x.notify()
	x.x = nil
	x.mu.Unlock()
	_ = sx.Close()
}

// readBatch bounds what one reader takes of each stream at a time.
const readBatch = 256 << 10

// piece is output a reader is to send: bytes, bytes to read from disk
// first (fromDisk), or a gap.
type piece struct {
	stream   int
	off      int64
	data     []byte
	fromDisk bool
	gapTo    int64
}

// events replays the output from the given offsets, then (follow) the
// rest until the end, calling emit for each event: a started event first
// when both offsets are 0, the exit (or error) event last. An offset past a stream's end waits for that offset.
// pinned is the foreground reader's: the command waits for it (it is
// never sent a gap while it reads).
func (x *execState) events(ctx context.Context, outFrom, errFrom int64, follow, pinned bool, emit func(ExecEvent) error) error {
	if pinned {
		defer x.unpin()
	}
	d := &diskReader{x: x}
	defer d.close()
	next := [2]int64{outFrom, errFrom}
	x.mu.Lock()
	if pinned && x.pinned {
		x.pin = next
		x.moved.Broadcast()
	}
	// Without follow, the output up to now is sent, and then the exit if
	// the command had ended by then.
	until := [2]int64{x.streams[stdout].total(), x.streams[stderr].total()}
	endedBefore := !x.running()
	started := x.started
	x.mu.Unlock()
	// A reader from the beginning gets the exec's history from its start,
	// so that a client hears of a silent command (sleep 30) at once, not
	// at its first byte of output.
	if outFrom == 0 && errFrom == 0 {
		if err := emit(ExecEvent{Type: EventStarted, ExecID: x.id, Time: started}); err != nil {
			return err
		}
	}
	for {
		var ps []piece
		x.mu.Lock()
		for i := range x.streams {
			s := &x.streams[i]
			end := s.total()
			if !follow {
				end = min(end, until[i])
			}
			if next[i] >= end {
				continue
			}
			n := min(end-next[i], readBatch)
			switch {
			case next[i] >= s.ring.start:
				b := make([]byte, n)
				s.ring.read(b, next[i])
				ps = append(ps, piece{stream: i, off: next[i], data: b})
			case next[i] < s.kept:
				n = min(n, s.kept-next[i])
				ps = append(ps, piece{stream: i, off: next[i], data: make([]byte, n), fromDisk: true})
			default:
				n = s.ring.start - next[i]
				ps = append(ps, piece{stream: i, off: next[i], gapTo: s.ring.start})
			}
			next[i] += n
		}
		if pinned && x.pinned {
			x.pin = next
			x.moved.Broadcast()
		}
		caught := next[stdout] >= x.streams[stdout].total() && next[stderr] >= x.streams[stderr].total()
		ended := caught && !x.running()
		if !follow {
			caught = next[stdout] >= until[stdout] && next[stderr] >= until[stderr]
			ended = caught && endedBefore
		}
		var last ExecEvent
		if ended {
			if x.exit != nil {
				last = ExecEvent{Type: EventExit, ExecID: x.id, Time: time.Now().UTC(), Exit: x.exit}
			} else {
				last = ExecEvent{Type: EventError, ExecID: x.id, Time: time.Now().UTC(), Error: x.failed}
			}
		}
		changed := x.changed
		x.mu.Unlock()
		for _, p := range ps {
			if p.fromDisk {
				if err := d.readAt(p.stream, p.data, p.off); err != nil {
					// The disk copy failed under the reader: say which bytes
					// it did not get rather than send others.
					p.gapTo, p.data = p.off+int64(len(p.data)), nil
				}
			}
			for _, ev := range x.pieceEvents(p) {
				if err := emit(ev); err != nil {
					return err
				}
			}
		}
		if ended {
			return emit(last)
		}
		if !follow && caught {
			return nil
		}
		if len(ps) > 0 {
			continue
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// pieceEvents is a piece as events: a gap, or output in events of at most
// 64 KiB, as text when it is valid UTF-8 and base64 otherwise. A cut
// falls between characters where it can, so that text stays text.
func (x *execState) pieceEvents(p piece) []ExecEvent {
	name := x.streams[p.stream].name
	now := time.Now().UTC()
	if p.data == nil {
		return []ExecEvent{{Type: EventGap, ExecID: x.id, Time: now, Stream: name, Offset: p.off, Next: p.gapTo}}
	}
	var out []ExecEvent
	b, off := p.data, p.off
	for len(b) > 0 {
		n := min(len(b), 64<<10)
		if n < len(b) {
			for k := n; k > n-utf8.UTFMax && k > 0; k-- {
				if utf8.RuneStart(b[k]) {
					n = k
					break
				}
			}
		}
		ev := ExecEvent{Type: name, ExecID: x.id, Time: now, Offset: off}
		if utf8.Valid(b[:n]) {
			ev.Text = string(b[:n])
		} else {
			ev.Base64 = b[:n]
		}
		out = append(out, ev)
		b, off = b[n:], off+int64(n)
	}
	return out
}

func (m *manager) Exec(ctx context.Context, id string, r ExecRequest, emit func(ExecEvent) error) (ExecInfo, error) {
	b, err := m.live(ctx, id)
	if err != nil {
		return ExecInfo{}, err
	}
	argv := r.Argv
	switch {
	case len(r.Argv) > 0 && r.Shell != "":
		return ExecInfo{}, Errorf(CodeBadRequest, "exec: give argv or shell, not both")
	case len(r.Argv) == 0 && r.Shell == "":
		return ExecInfo{}, Errorf(CodeBadRequest, `exec: give the command as argv (["ls", "-l"]) or as shell ("ls -l | wc -l")`)
	case r.Shell != "":
		argv = []string{"/bin/sh", "-c", r.Shell}
	}
	if r.PTY != nil {
		if err := r.PTY.check(); err != nil {
			return ExecInfo{}, err
		}
		if r.Stdin != nil {
			return ExecInfo{}, Errorf(CodeBadRequest, "exec: a pty's stdin is the terminal: give pty without stdin (write to it with the exec's stdin route)")
		}
		r.StdinOpen = true
	}
	if r.StdinOpen && r.Stdin != nil {
		return ExecInfo{}, Errorf(CodeBadRequest, "exec: give stdin (written whole, then closed) or stdinOpen (written later with the exec's stdin route), not both")
	}
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return ExecInfo{}, Errorf(CodeBadRequest, "exec: an argument holds a NUL byte")
		}
	}
	decision, err := m.authorize(ctx, b, policy.Action{Action: policy.ActionExec, Command: argv, Cwd: r.Cwd, EnvNames: envNames(r.Env)})
	if err != nil {
		return ExecInfo{}, err
	}
	b.mu.Lock()
	sb := b.sb
	b.mu.Unlock()
	env := map[string]string{}
	for _, kv := range sb.Env() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for k, v := range r.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return ExecInfo{}, Errorf(CodeBadRequest, "exec: env %q is not a valid variable", k)
		}
		env[k] = v
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	envList := make([]string, 0, len(keys))
	for _, k := range keys {
		envList = append(envList, k+"="+env[k])
	}
	// The step's timeout is the default: the session's job has none (the
	// agent resolves the cwd: guest.SessionRequest.ExecJob).
	timeout := r.Timeout.D()
	if timeout == 0 {
		timeout = time.Duration(sb.Step.Resources.TimeoutMS) * time.Millisecond
	}
	execID, err := newID()
	if err != nil {
		return ExecInfo{}, err
	}
	execID = "x" + execID[:11]
	spanCtx, span := startExecSpan(ctx, id, argv)
	envList = withTraceEnv(spanCtx, envList)
	// The command outlives this request when it runs in the background:
	// its connection to the agent is not tied to ctx.
	q := guest.SessionRequest{
		Op: guest.OpExec, Command: argv, Env: envList, Workdir: r.Cwd,
		UID: guest.DefaultUID, GID: guest.DefaultGID, TimeoutMS: timeout.Milliseconds(),
		Stdin: r.Stdin != nil || r.StdinOpen,
	}
	if r.PTY != nil {
		q.PTY = &guest.PTYSize{Cols: uint16(r.PTY.Cols), Rows: uint16(r.PTY.Rows)}
	}
	if err := q.Check(); err != nil { // the protocol's one check: what it refuses is the caller's to fix
		endExecSpan(span, execID, nil, err.Error())
		return ExecInfo{}, Errorf(CodeBadRequest, "exec: %v", err)
	}
	sx, err := sb.Session.Exec(context.WithoutCancel(ctx), q)
	if err != nil {
		endExecSpan(span, execID, nil, err.Error())
		return ExecInfo{}, &Error{Code: CodeInternal, Message: fmt.Sprintf("exec in sandbox %s: %v", id, err), Err: err}
	}
	x := newExecState(execID, m.o.LogLimit, sb.Store(), !r.Background)
	x.argv, x.started, x.x, x.decision, x.span = argv, time.Now().UTC(), sx, decision, span
	x.stdinOpen = r.StdinOpen
	x.req = r
	x.req.Stdin = nil // written below, not kept
	b.mu.Lock()
	if b.killing {
		b.mu.Unlock()
		_ = sx.Close()
		endExecSpan(span, execID, nil, "the sandbox is stopping")
		return ExecInfo{}, Errorf(CodeConflict, "sandbox %s is stopping", id)
	}
	b.execs[execID] = x
	b.mu.Unlock()
	go x.pump()
	go b.recordExec(x, keys)
	if r.Stdin != nil {
		go func() {
			data := []byte(*r.Stdin)
			for len(data) > 0 {
				n := min(len(data), guest.MaxSessionChunk)
				if sx.WriteStdin(data[:n]) != nil {
					return
				}
				data = data[n:]
			}
			_ = sx.CloseStdin()
		}()
	}
	if r.Background {
		return x.info(id), nil
	}
	if err := x.events(ctx, 0, 0, true, true, func(ev ExecEvent) error {
		if emit == nil {
			return nil
		}
		return emit(ev)
	}); err != nil {
		x.kill() // the client went away: the command goes too
	}
	// Its entry is in the record before the caller can act again, so the
	// record lists actions in the order they happened (a restore right
	// after an exec comes after it).
	<-x.recorded
	b.touch()
	return x.info(id), nil
}

func (b *box) touch() {
	b.mu.Lock()
	b.info.LastActive = time.Now().UTC()
	b.mu.Unlock()
}

// recordExec appends the command to the sandbox's record once it ended:
// its output streams are stored as blobs (what was written to disk as it
// came), then the memory they held is released once no foreground reader
// needs it.
func (b *box) recordExec(x *execState, envNames []string) {
	<-x.done
	x.storeOutput()
	x.mu.Lock()
	a := record.Action{Kind: "exec", Time: x.started, Command: x.argv, Cwd: x.req.Cwd, EnvNames: envNames, Background: x.req.Background, Decision: x.decision}
	a.Stdout, a.Stderr = x.streams[stdout].blob, x.streams[stderr].blob
	a.StdoutTruncated = x.streams[stdout].total() - x.streams[stdout].kept
	a.StderrTruncated = x.streams[stderr].total() - x.streams[stderr].kept
	var diskErrs []error
	for _, s := range x.streams {
		if s.diskErr != nil {
			diskErrs = append(diskErrs, fmt.Errorf("%s: %w", s.name, s.diskErr))
		}
	}
	summary := summaryCmd(x.argv)
	if x.exit != nil {
		code := x.exit.ExitCode
		a.ExitCode, a.Signal, a.TimedOut = &code, x.exit.Signal, x.exit.TimedOut
		a.DurationMS, a.CPUTimeNs, a.MaxRSS = x.exit.DurationMS, x.exit.CPUTimeNs, x.exit.MaxRSS
		summary += fmt.Sprintf(" → exit %d", code)
		if x.exit.Signal != "" {
			summary += " (" + x.exit.Signal + ")"
		}
	} else {
		a.Error = x.failed
		summary += " → " + x.failed
	}
	endExecSpan(x.span, x.id, x.exit, x.failed)
	x.span = nil
	x.mu.Unlock()
	if len(diskErrs) > 0 {
		b.m.o.Logf("sandbox %s: exec %s: its output is not all in the record: %v", b.id, x.id, errors.Join(diskErrs...))
	}
	b.addEntry(a, summary)
	b.mu.Lock()
	b.ended = append(b.ended, x.id)
	if len(b.ended) > maxEndedExecs {
		delete(b.execs, b.ended[0])
		b.ended = b.ended[1:]
	}
	b.mu.Unlock()
	close(x.recorded)
	x.release()
}

// maxEndedExecs bounds the ended execs a sandbox keeps (their state and
// the way to their output); the oldest go first. Their record entries
// stay.
const maxEndedExecs = 256

func (m *manager) execState(ctx context.Context, id, execID string) (*box, *execState, error) {
	b, err := m.box(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	b.mu.Lock()
	x, ok := b.execs[execID]
	stopped, rec := b.info.State == StateStopped, b.info.Record
	b.mu.Unlock()
	if !ok && stopped && rec != "" {
		return nil, nil, Errorf(CodeNotFound, "sandbox %s is stopped and its execs are gone from the server: their output is in its record %s (agentsandbox records show %s)", id, rec, rec)
	}
	if !ok {
		return nil, nil, Errorf(CodeNotFound, "sandbox %s has no exec %q (it keeps its last %d ended execs; the record has every one once the sandbox stops)", id, execID, maxEndedExecs)
	}
	return b, x, nil
}

func (m *manager) GetExec(ctx context.Context, id, execID string) (ExecInfo, error) {
	_, x, err := m.execState(ctx, id, execID)
	if err != nil {
		return ExecInfo{}, err
	}
	return x.info(id), nil
}

func (m *manager) Output(ctx context.Context, id, execID string, stdoutFrom, stderrFrom int64, follow bool, emit func(ExecEvent) error) error {
	if stdoutFrom < 0 || stderrFrom < 0 {
		return Errorf(CodeBadRequest, "output offsets must be 0 or more")
	}
	b, x, err := m.execState(ctx, id, execID)
	if err != nil {
		return err
	}
	b.touch()
	return x.events(ctx, stdoutFrom, stderrFrom, follow, false, emit)
}

func (m *manager) Signal(ctx context.Context, id, execID, signal string) error {
	b, x, err := m.execState(ctx, id, execID)
	if err != nil {
		return err
	}
	sx := x.session()
	if sx == nil {
		return Errorf(CodeConflict, "exec %s has already ended", execID)
	}
	switch signal {
	case "SIGTERM", "SIGKILL", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGSTOP", "SIGCONT":
	default:
		return Errorf(CodeBadRequest, "signal %q: want one of SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGSTOP, SIGCONT", signal)
	}
	b.touch()
	if err := sx.Signal(signal); err != nil {
		return &Error{Code: CodeInternal, Message: fmt.Sprintf("signal exec %s: %v", execID, err), Err: err}
	}
	return nil
}

// MaxStdinWrite bounds the data of one WriteStdin: a bigger input is
// written in several calls.
const MaxStdinWrite = 1 << 20

// openStdin is the exec's session for a write to its open stdin, under
// x.stdinMu (held by the caller), or the error to answer.
func (x *execState) openStdin(execID string) (vmrunner.Exec, error) {
	if !x.stdinOpen {
		if x.req.StdinOpen {
			return nil, Errorf(CodeConflict, "exec %s: its stdin is already closed", execID)
		}
		return nil, Errorf(CodeConflict, "exec %s was not started with stdinOpen: its stdin is not open to writes", execID)
	}
	sx := x.session()
	if sx == nil || !x.running() {
		return nil, Errorf(CodeConflict, "exec %s has already ended", execID)
	}
	return sx, nil
}

func (m *manager) WriteStdin(ctx context.Context, id, execID string, data []byte) error {
	if len(data) > MaxStdinWrite {
		return Errorf(CodeTooLarge, "stdin write of %d bytes: the most in one write is %d bytes; write it in pieces", len(data), MaxStdinWrite)
	}
	b, x, err := m.execState(ctx, id, execID)
	if err != nil {
		return err
	}
	x.stdinMu.Lock()
	defer x.stdinMu.Unlock()
	sx, err := x.openStdin(execID)
	if err != nil {
		return err
	}
	b.touch()
	return stdinError(x, execID, "write to", sx.WriteStdin(data))
}

// stdinError is a failed write to or close of an exec's stdin as the
// caller sees it: a conflict when the command ended meanwhile, the
// host's failure otherwise.
func stdinError(x *execState, execID, what string, err error) error {
	if err == nil {
		return nil
	}
	if !x.running() {
		return Errorf(CodeConflict, "exec %s has already ended", execID)
	}
	return &Error{Code: CodeInternal, Message: fmt.Sprintf("%s the stdin of exec %s: %v", what, execID, err), Err: err}
}

func (m *manager) CloseStdin(ctx context.Context, id, execID string) error {
	b, x, err := m.execState(ctx, id, execID)
	if err != nil {
		return err
	}
	x.stdinMu.Lock()
	defer x.stdinMu.Unlock()
	sx, err := x.openStdin(execID)
	if err != nil {
		return err
	}
	b.touch()
	x.stdinOpen = false
	return stdinError(x, execID, "close", sx.CloseStdin())
}

func (m *manager) ResizePTY(ctx context.Context, id, execID string, size PTYSize) error {
	if err := size.check(); err != nil {
		return err
	}
	b, x, err := m.execState(ctx, id, execID)
	if err != nil {
		return err
	}
	if x.req.PTY == nil {
		return Errorf(CodeConflict, "exec %s was not started with a pty: there is no terminal to resize", execID)
	}
	sx := x.session()
	if sx == nil || !x.running() {
		return Errorf(CodeConflict, "exec %s has already ended", execID)
	}
	b.touch()
	if err := sx.Resize(guest.PTYSize{Cols: uint16(size.Cols), Rows: uint16(size.Rows)}); err != nil {
		return &Error{Code: CodeInternal, Message: fmt.Sprintf("resize the pty of exec %s: %v", execID, err), Err: err}
	}
	return nil
}
