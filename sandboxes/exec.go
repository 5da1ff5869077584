package sandboxes

import (
	"context"
	"fmt"
	"slices"
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

// stream is one output stream of an exec: the last MaxKeptOutput bytes
// (for reading later), how many came before them, and the head the record
// keeps (up to the log limit).
type stream struct {
	kept  []byte
	base  int64 // offset of kept[0]
	total int64
	head  []byte
	limit int64
}

func (s *stream) add(p []byte) {
	s.total += int64(len(p))
	if room := s.limit - int64(len(s.head)); room > 0 {
		s.head = append(s.head, p[:min(int64(len(p)), room)]...)
	}
	s.kept = append(s.kept, p...)
	if over := len(s.kept) - MaxKeptOutput; over > 0 {
		s.kept = slices.Clone(s.kept[over:])
		s.base += int64(over)
	}
}

// from returns the kept bytes at and after off, and the offset they
// start at (later than off when those bytes are no longer kept).
func (s *stream) from(off int64) ([]byte, int64) {
	if off < s.base {
		off = s.base
	}
	if off >= s.total {
		return nil, s.total
	}
	return s.kept[off-s.base:], off
}

// execState is one command of a sandbox, running or ended.
type execState struct {
	id       string
	req      ExecRequest
	argv     []string
	decision string // the policy decision that admitted it
	started  time.Time
	x        vmrunner.SessionExec
	span     trace.Span // ended by recordExec

	mu       sync.Mutex
	out, err stream
	exit     *ExitStatus
	failed   string        // an error event: it never ran
	changed  chan struct{} // closed and replaced on every change
	done     chan struct{} // closed once the exit (or error) is in
	recorded chan struct{} // closed once its record entry is written
}

func (x *execState) running() bool {
	select {
	case <-x.done:
		return false
	default:
		return true
	}
}

func (x *execState) kill() {
	if x.running() {
		_ = x.x.Close()
	}
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
		StdoutBytes: x.out.total, StderrBytes: x.err.total}
}

// pump reads the command's events until its end.
func (x *execState) pump() {
	for ev := range x.x.Events() {
		x.mu.Lock()
		switch ev.Type {
		case guest.EventStdout:
			x.out.add(ev.Data)
		case guest.EventStderr:
			x.err.add(ev.Data)
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
	x.mu.Unlock()
	_ = x.x.Close()
}

// events replays the output from the given offsets, then (follow) the
// rest until the end, calling emit for each event; the exit (or error)
// event comes last.
func (x *execState) events(ctx context.Context, outFrom, errFrom int64, follow bool, emit func(ExecEvent) error) error {
	for {
		x.mu.Lock()
		var evs []ExecEvent
		if b, off := x.out.from(outFrom); len(b) > 0 {
			evs = append(evs, chunkEvents(x.id, EventStdout, b, off)...)
			outFrom = off + int64(len(b))
		}
		if b, off := x.err.from(errFrom); len(b) > 0 {
			evs = append(evs, chunkEvents(x.id, EventStderr, b, off)...)
			errFrom = off + int64(len(b))
		}
		ended := !x.running()
		if ended {
			if x.exit != nil {
				evs = append(evs, ExecEvent{Type: EventExit, ExecID: x.id, Time: time.Now().UTC(), Exit: x.exit})
			} else {
				evs = append(evs, ExecEvent{Type: EventError, ExecID: x.id, Time: time.Now().UTC(), Error: x.failed})
			}
		}
		changed := x.changed
		x.mu.Unlock()
		for _, ev := range evs {
			if err := emit(ev); err != nil {
				return err
			}
		}
		if ended || !follow {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// chunkEvents splits output into events of at most 64 KiB, as text when
// it is valid UTF-8 and base64 otherwise.
func chunkEvents(id, typ string, b []byte, off int64) []ExecEvent {
	var out []ExecEvent
	now := time.Now().UTC()
	for len(b) > 0 {
		n := min(len(b), 64<<10)
		ev := ExecEvent{Type: typ, ExecID: id, Time: now, Offset: off}
		if utf8.Valid(b[:n]) {
			ev.Text = string(b[:n])
		} else {
			ev.Base64 = slices.Clone(b[:n])
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
	timeout := r.Timeout.D()
	if timeout == 0 {
		timeout = time.Duration(sb.Step.Resources.TimeoutMS) * time.Millisecond
	}
	workdir := guest.WorkspaceMount
	if r.Cwd != "" {
		if strings.HasPrefix(r.Cwd, "/") {
			workdir = r.Cwd
		} else {
			workdir = guest.WorkspaceMount + "/" + r.Cwd
		}
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
	sx, err := sb.Session.Exec(context.WithoutCancel(ctx), guest.SessionRequest{
		Op: guest.OpExec, Command: argv, Env: envList, Workdir: workdir,
		UID: guest.DefaultUID, GID: guest.DefaultGID, TimeoutMS: timeout.Milliseconds(),
		Stdin: r.Stdin != nil,
	})
	if err != nil {
		endExecSpan(span, execID, nil, err.Error())
		return ExecInfo{}, &Error{Code: CodeInternal, Message: fmt.Sprintf("exec in sandbox %s: %v", id, err), Err: err}
	}
	x := &execState{id: execID, req: r, argv: argv, started: time.Now().UTC(), x: sx, decision: decision, span: span,
		changed: make(chan struct{}), done: make(chan struct{}), recorded: make(chan struct{})}
	x.out.limit, x.err.limit = m.o.LogLimit, m.o.LogLimit
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
	if err := x.events(ctx, 0, 0, true, func(ev ExecEvent) error {
		if emit == nil {
			return nil
		}
		return emit(ev)
	}); err != nil {
		x.kill() // the client went away: the command goes too
		<-x.done
	}
	<-x.done
	b.touch()
	return x.info(id), nil
}

func (b *box) touch() {
	b.mu.Lock()
	b.info.LastActive = time.Now().UTC()
	b.mu.Unlock()
}

// recordExec appends the command to the sandbox's record once it ended.
func (b *box) recordExec(x *execState, envNames []string) {
	defer close(x.recorded)
	<-x.done
	x.mu.Lock()
	a := record.Action{Kind: "exec", Time: x.started, Command: x.argv, Cwd: x.req.Cwd, EnvNames: envNames, Background: x.req.Background, Decision: x.decision}
	out, errb := slices.Clone(x.out.head), slices.Clone(x.err.head)
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
	x.mu.Unlock()
	store := b.sb.Store()
	for _, s := range []struct {
		data []byte
		to   **record.Digest
	}{{out, &a.Stdout}, {errb, &a.Stderr}} {
		d, _, err := store.PutBlob(bytesReader(s.data))
		if err == nil {
			*s.to = &d
		}
	}
	b.addEntry(a, summary)
}

func (m *manager) execState(ctx context.Context, id, execID string) (*box, *execState, error) {
	b, err := m.box(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	b.mu.Lock()
	x, ok := b.execs[execID]
	b.mu.Unlock()
	if !ok {
		return nil, nil, Errorf(CodeNotFound, "sandbox %s has no exec %q", id, execID)
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
	return x.events(ctx, stdoutFrom, stderrFrom, follow, emit)
}

func (m *manager) Signal(ctx context.Context, id, execID, signal string) error {
	b, x, err := m.execState(ctx, id, execID)
	if err != nil {
		return err
	}
	if !x.running() {
		return Errorf(CodeConflict, "exec %s has already ended", execID)
	}
	switch signal {
	case "SIGTERM", "SIGKILL", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGSTOP", "SIGCONT":
	default:
		return Errorf(CodeBadRequest, "signal %q: want one of SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGSTOP, SIGCONT", signal)
	}
	b.touch()
	if err := x.x.Signal(signal); err != nil {
		return &Error{Code: CodeInternal, Message: fmt.Sprintf("signal exec %s: %v", execID, err), Err: err}
	}
	return nil
}
