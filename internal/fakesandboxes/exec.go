package fakesandboxes

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// maxChunk bounds the text of one stdout or stderr event.
const maxChunk = 64 << 10

// kept is one output stream, kept as the real manager keeps it: its first
// limit bytes in a file (the real one's blob), its newest bytes in memory
// (at least sandboxes.OutputWindow, at most twice that), and a gap
// between for the bytes past the limit that left memory.
type kept struct {
	path   string // the file of the first limit bytes
	file   *os.File
	limit  int64
	onDisk int64
	tail   []byte // bytes [base, total)
	base   int64
	total  int64
}

// drops is where the tail would start after n more bytes.
func (k *kept) drops(n int) int64 {
	if len(k.tail)+n <= 2*sandboxes.OutputWindow {
		return k.base
	}
	return k.total + int64(n) - sandboxes.OutputWindow
}

func (k *kept) write(p []byte) error {
	var err error
	if room := k.limit - k.onDisk; room > 0 && k.path != "" {
		if k.file == nil {
			k.file, err = os.OpenFile(k.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		}
		if err == nil {
			var n int
			n, err = k.file.Write(p[:min(int64(len(p)), room)])
			k.onDisk += int64(n)
		}
	}
	k.tail = append(k.tail, p...)
	k.total += int64(len(p))
	if len(k.tail) > 2*sandboxes.OutputWindow {
		drop := len(k.tail) - sandboxes.OutputWindow
		k.tail = append([]byte(nil), k.tail[drop:]...)
		k.base += int64(drop)
	}
	return err
}

// from copies at most maxChunk bytes from offset off and says where they
// start; gapTo is set instead when the bytes at off are not kept.
func (k *kept) from(off int64) (b []byte, gapTo int64, err error) {
	if off >= k.total {
		return nil, 0, nil
	}
	if off < k.onDisk {
		b = make([]byte, min(maxChunk, k.onDisk-off))
		_, err := k.file.ReadAt(b, off)
		return b, 0, err
	}
	if off < k.base {
		return nil, k.base, nil
	}
	b = k.tail[off-k.base:]
	if len(b) > maxChunk {
		b = b[:maxChunk]
	}
	return append([]byte(nil), b...), 0, nil
}

type execState struct {
	mu       sync.Mutex
	info     sandboxes.ExecInfo
	proc     *os.Process
	out, err kept
	done     bool
	startErr string
	timedOut bool
	changed  chan struct{} // closed and replaced on every change
	// pinned holds the command, as the real manager does, while its
	// foreground reader has not read the bytes that would leave memory
	// and are not on disk; pin are that reader's offsets.
	pinned bool
	pin    [2]int64
	moved  *sync.Cond
}

func (e *execState) update(f func()) {
	e.mu.Lock()
	f()
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
}

func (e *execState) unpin() {
	e.mu.Lock()
	e.pinned = false
	e.moved.Broadcast()
	e.mu.Unlock()
}

type streamWriter struct {
	e      *execState
	stderr bool
}

func (w streamWriter) Write(p []byte) (int, error) {
	e := w.e
	e.mu.Lock()
	defer e.mu.Unlock()
	k, i := &e.out, 0
	if w.stderr {
		k, i = &e.err, 1
	}
	for e.pinned && e.pin[i] < k.drops(len(p)) && k.onDisk < k.drops(len(p)) {
		e.moved.Wait()
	}
	k.write(p) // a failed disk copy ends at what it has; the rest is a gap
	e.info.StdoutBytes, e.info.StderrBytes = e.out.total, e.err.total
	close(e.changed)
	e.changed = make(chan struct{})
	return len(p), nil
}

// kill sends SIGKILL to the exec's process group.
func (e *execState) kill(timedOut bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done || e.proc == nil {
		return
	}
	if timedOut {
		e.timedOut = true
	}
	syscall.Kill(-e.proc.Pid, syscall.SIGKILL)
}

func (e *execState) snapshot() sandboxes.ExecInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	i := e.info
	i.Request.Env = maps.Clone(i.Request.Env)
	if i.Exit != nil {
		x := *i.Exit
		i.Exit = &x
	}
	return i
}

func event(typ, execID string) sandboxes.ExecEvent {
	return sandboxes.ExecEvent{Type: typ, ExecID: execID, Time: time.Now().UTC()}
}

func outputEvent(typ, execID string, off int64, b []byte) sandboxes.ExecEvent {
	ev := event(typ, execID)
	ev.Offset = off
	if utf8.Valid(b) {
		ev.Text = string(b)
	} else {
		ev.Base64 = b
	}
	return ev
}

// follow emits the output from the given offsets, then (follow) what
// comes, then the exit or error event once the exec is done. pinned is
// the foreground reader's, which the command waits for.
func (e *execState) follow(ctx context.Context, outFrom, errFrom int64, follow, pinned bool, emit func(sandboxes.ExecEvent) error) error {
	if pinned {
		defer e.unpin()
	}
	next := [2]int64{outFrom, errFrom}
	e.mu.Lock()
	until := [2]int64{e.out.total, e.err.total}
	doneBefore := e.done
	e.mu.Unlock()
	for {
		var evs []sandboxes.ExecEvent
		e.mu.Lock()
		for i, k := range []*kept{&e.out, &e.err} {
			if !follow && next[i] >= until[i] {
				continue
			}
			typ := []string{sandboxes.EventStdout, sandboxes.EventStderr}[i]
			b, gapTo, err := k.from(next[i])
			switch {
			case err != nil:
				gapTo = next[i] + int64(len(b))
				fallthrough
			case gapTo > 0:
				ev := event(sandboxes.EventGap, e.info.ID)
				ev.Stream, ev.Offset, ev.Next = typ, next[i], gapTo
				evs = append(evs, ev)
				next[i] = gapTo
			case len(b) > 0:
				evs = append(evs, outputEvent(typ, e.info.ID, next[i], b))
				next[i] += int64(len(b))
			}
		}
		if pinned && e.pinned {
			e.pin = next
			e.moved.Broadcast()
		}
		done, ch := e.done, e.changed
		caught := next[0] >= e.out.total && next[1] >= e.err.total
		if !follow {
			caught, done = next[0] >= until[0] && next[1] >= until[1], doneBefore
		}
		info := e.info
		startErr := e.startErr
		e.mu.Unlock()
		for _, ev := range evs {
			if err := emit(ev); err != nil {
				return err
			}
		}
		if len(evs) > 0 && !caught {
			continue
		}
		if caught && done {
			if startErr != "" {
				ev := event(sandboxes.EventError, info.ID)
				ev.Error = startErr
				return emit(ev)
			}
			ev := event(sandboxes.EventExit, info.ID)
			x := *info.Exit
			ev.Exit = &x
			return emit(ev)
		}
		if !follow && caught {
			return nil
		}
		if len(evs) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return sandboxes.Errorf(sandboxes.CodeInternal, "follow exec %s: %w", info.ID, ctx.Err())
		case <-ch:
		}
	}
}

// workdir maps an exec's cwd to the host: relative to the workspace, or
// absolute under /workspace.
func (sb *sandbox) workdir(cwd string) (string, error) {
	rel := cwd
	if path.IsAbs(cwd) {
		if cwd != "/workspace" && !strings.HasPrefix(cwd, "/workspace/") {
			return "", sandboxes.Errorf(sandboxes.CodeBadRequest, "cwd %q: the fake sandboxes have only /workspace; give a path relative to it", cwd)
		}
		rel = strings.TrimPrefix(strings.TrimPrefix(cwd, "/workspace"), "/")
	}
	if rel == "" {
		return sb.dir, nil
	}
	if !filepath.IsLocal(rel) {
		return "", sandboxes.Errorf(sandboxes.CodeBadRequest, "cwd %q leaves the workspace: give a path inside it", cwd)
	}
	fi, err := sb.root.Stat(rel)
	if err != nil || !fi.IsDir() {
		return "", sandboxes.Errorf(sandboxes.CodeBadRequest, "cwd %q is not a directory in the workspace: create it first", cwd)
	}
	return filepath.Join(sb.dir, rel), nil
}

func (m *Manager) Exec(ctx context.Context, id string, r sandboxes.ExecRequest, emit func(sandboxes.ExecEvent) error) (sandboxes.ExecInfo, error) {
	if (len(r.Argv) == 0) == (r.Shell == "") {
		return sandboxes.ExecInfo{}, sandboxes.Errorf(sandboxes.CodeBadRequest, "exec: give exactly one of argv (a command and its arguments) and shell (a /bin/sh -c script)")
	}
	if len(r.Argv) > 0 && r.Argv[0] == "" {
		return sandboxes.ExecInfo{}, sandboxes.Errorf(sandboxes.CodeBadRequest, "exec: argv[0] is empty; name the command to run")
	}
	if !r.Background && emit == nil {
		return sandboxes.ExecInfo{}, sandboxes.Errorf(sandboxes.CodeInternal, "exec: a foreground exec needs an emit function")
	}
	m.mu.Lock()
	sb, err := m.running(ctx, id)
	if err != nil {
		m.mu.Unlock()
		return sandboxes.ExecInfo{}, err
	}
	dir, err := sb.workdir(r.Cwd)
	if err != nil {
		m.mu.Unlock()
		return sandboxes.ExecInfo{}, err
	}
	sb.seq++
	e := &execState{changed: make(chan struct{}), pinned: !r.Background}
	e.moved = sync.NewCond(&e.mu)
	e.info = sandboxes.ExecInfo{ID: fmt.Sprintf("ex-%d", sb.seq), Sandbox: id, Request: r, Started: m.now(), Running: true}
	e.info.Request.Env = maps.Clone(r.Env)
	e.info.Request.Stdin = nil // not kept, as in the real manager
	limit := m.LogLimit
	if limit <= 0 {
		limit = sandboxes.DefaultLogLimit
	}
	e.out = kept{path: filepath.Join(m.dir, fmt.Sprintf(".%s-%s.stdout", id, e.info.ID)), limit: limit}
	e.err = kept{path: filepath.Join(m.dir, fmt.Sprintf(".%s-%s.stderr", id, e.info.ID)), limit: limit}
	sb.execs[e.info.ID] = e
	env := os.Environ()
	for k, v := range sb.spec.Env {
		env = append(env, k+"="+v)
	}
	for k, v := range r.Env {
		env = append(env, k+"="+v)
	}
	timeout := r.Timeout.D()
	if timeout == 0 {
		timeout = time.Until(sb.info.ExpiresAt)
	}
	m.mu.Unlock()

	argv := r.Argv
	if r.Shell != "" {
		argv = []string{"/bin/sh", "-c", r.Shell}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(env, "WORKSPACE="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if r.Stdin != nil {
		cmd.Stdin = strings.NewReader(*r.Stdin)
	}
	cmd.Stdout = streamWriter{e: e}
	cmd.Stderr = streamWriter{e: e, stderr: true}
	cmd.WaitDelay = time.Second // a background child holding the pipes open does not hold the exec
	start := time.Now()
	if err := cmd.Start(); err != nil {
		msg := fmt.Sprintf("start %q: %v: check the command's name and that it is installed", argv[0], err)
		e.update(func() {
			e.done, e.startErr, e.info.Running = true, msg, false
		})
		if r.Background {
			m.mu.Lock()
			delete(sb.execs, e.info.ID)
			m.mu.Unlock()
			return sandboxes.ExecInfo{}, sandboxes.Errorf(sandboxes.CodeBadRequest, "%s", msg)
		}
		ev := event(sandboxes.EventError, e.info.ID)
		ev.Error = msg
		return e.snapshot(), emit(ev)
	}
	e.mu.Lock()
	e.proc = cmd.Process
	e.mu.Unlock()
	timer := time.AfterFunc(timeout, func() { e.kill(true) })
	go func() {
		cmd.Wait()
		timer.Stop()
		ps := cmd.ProcessState
		x := &sandboxes.ExitStatus{ExitCode: ps.ExitCode(), DurationMS: time.Since(start).Milliseconds(),
			CPUTimeNs: (ps.UserTime() + ps.SystemTime()).Nanoseconds()}
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			x.Signal = unix.SignalName(ws.Signal())
			x.ExitCode = 128 + int(ws.Signal())
		}
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			x.MaxRSS = ru.Maxrss * 1024
		}
		e.update(func() {
			x.TimedOut = e.timedOut
			e.done, e.info.Running, e.info.Exit = true, false, x
		})
	}()
	if r.Background {
		return e.snapshot(), nil
	}
	err = emit(event(sandboxes.EventStarted, e.info.ID))
	if err == nil {
		err = e.follow(ctx, 0, 0, true, true, emit)
	}
	if err != nil {
		e.unpin()
		e.kill(false) // the client went away
		return e.snapshot(), err
	}
	return e.snapshot(), nil
}

func (m *Manager) exec(ctx context.Context, id, execID string) (*execState, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	e, ok := sb.execs[execID]
	if !ok && sb.info.State != sandboxes.StateRunning {
		return nil, sandboxes.Errorf(sandboxes.CodeNotFound, "sandbox %s is stopped and its execs are gone from the server: their output is in its record %s", id, sb.info.Record)
	}
	if !ok {
		return nil, sandboxes.Errorf(sandboxes.CodeNotFound, "no exec %q in sandbox %s: list its execs' ids from the exec answers", execID, id)
	}
	return e, nil
}

func (m *Manager) GetExec(ctx context.Context, id, execID string) (sandboxes.ExecInfo, error) {
	e, err := m.exec(ctx, id, execID)
	if err != nil {
		return sandboxes.ExecInfo{}, err
	}
	return e.snapshot(), nil
}

func (m *Manager) Output(ctx context.Context, id, execID string, stdoutFrom, stderrFrom int64, follow bool, emit func(sandboxes.ExecEvent) error) error {
	if stdoutFrom < 0 || stderrFrom < 0 {
		return sandboxes.Errorf(sandboxes.CodeBadRequest, "output: offsets must not be negative")
	}
	e, err := m.exec(ctx, id, execID)
	if err != nil {
		return err
	}
	return e.follow(ctx, stdoutFrom, stderrFrom, follow, false, emit)
}

func (m *Manager) Signal(ctx context.Context, id, execID, signal string) error {
	// The signals the real manager takes, by their full names.
	switch signal {
	case "SIGTERM", "SIGKILL", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGSTOP", "SIGCONT":
	default:
		return sandboxes.Errorf(sandboxes.CodeBadRequest, "signal %q: want one of SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGSTOP, SIGCONT", signal)
	}
	sig := unix.SignalNum(signal)
	e, err := m.exec(ctx, id, execID)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done || e.proc == nil {
		return sandboxes.Errorf(sandboxes.CodeConflict, "exec %s has ended: there is nothing to signal", execID)
	}
	if err := syscall.Kill(-e.proc.Pid, sig); err != nil {
		return sandboxes.Errorf(sandboxes.CodeInternal, "signal exec %s: %w", execID, err)
	}
	return nil
}
