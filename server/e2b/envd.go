package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// envd, E2B's in-sandbox daemon, as the SDK reaches it through
// E2B_SANDBOX_URL: every request names its sandbox (E2b-Sandbox-Id) and,
// but for GET /health, carries the sandbox's access token; it acts for
// the identity that created the sandbox. Commands and files are the
// Manager's: a command is a background exec whose output the stream
// follows (so it outlives its stream, as envd's do), a path is one of the
// workspace, which is /home/user.

func (s *Service) serveEnvd(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("E2b-Sandbox-Id")
	if port := r.Header.Get("E2b-Sandbox-Port"); port != "" && port != envdPort {
		writeUnaryError(w, rpcErrorf(codeUnimplemented, "E2b-Sandbox-Port %s: reaching a port of a sandbox other than envd's (%s) is not built yet in agentsandbox's E2B transport (docs/e2b.md)", port, envdPort))
		return
	}
	if err := checkUser(r); err != nil && r.URL.Path != "/health" {
		switch {
		case r.URL.Path == "/files":
			filesError(w, err)
		case r.Header.Get("Content-Type") == streamType:
			newEventStream(w).end(err)
		default:
			writeUnaryError(w, err)
		}
		return
	}
	switch p := r.URL.Path; {
	case p == "/health" && r.Method == http.MethodGet:
		s.health(w, r, id)
	case p == "/files":
		s.files(w, r, id)
	case strings.HasPrefix(p, "/process.Process/") || strings.HasPrefix(p, "/filesystem.Filesystem/"):
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeUnaryError(w, rpcErrorf(codeUnimplemented, "%s %s: Connect calls are POST", r.Method, p))
			return
		}
		s.rpc(w, r, id, p)
	default:
		writeJSON(w, http.StatusNotFound, "application/json", apiError{Code: http.StatusNotFound, Message: fmt.Sprintf("no envd route %s %s (docs/e2b.md lists them)", r.Method, p)})
	}
}

// health answers 204 while the sandbox runs, and 502 (what E2B's proxy
// answers for a sandbox that is gone, which isRunning() reads as false)
// for one that does not, or that no token was made for.
func (s *Service) health(w http.ResponseWriter, r *http.Request, id string) {
	b := s.box(id)
	if b != nil {
		ctx := sandboxes.WithIdentity(r.Context(), b.owner)
		if info, err := s.m.Get(ctx, id); err == nil && info.State == sandboxes.StateRunning {
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	writeJSON(w, http.StatusBadGateway, "application/json", apiError{Code: http.StatusBadGateway, Message: fmt.Sprintf("sandbox %q is not running", id)})
}

// unary are the unary calls built, by path.
var unary = map[string]func(s *Service, ctx context.Context, b *box, r *http.Request) (any, error){
	"/process.Process/List":          (*Service).listProcesses,
	"/process.Process/SendSignal":    (*Service).sendSignal,
	"/process.Process/SendInput":     (*Service).sendInput,
	"/process.Process/CloseStdin":    (*Service).closeStdin,
	"/process.Process/Update":        (*Service).update,
	"/filesystem.Filesystem/Stat":    (*Service).stat,
	"/filesystem.Filesystem/ListDir": (*Service).listDir,
	"/filesystem.Filesystem/Remove":  (*Service).remove,
	"/filesystem.Filesystem/MakeDir": (*Service).makeDir,
	"/filesystem.Filesystem/Move":    (*Service).move,
}

// streams are the server streams: the SDK reads their errors from the
// end-of-stream envelope.
var streams = map[string]bool{"/filesystem.Filesystem/WatchDir": true}

func (s *Service) rpc(w http.ResponseWriter, r *http.Request, id, path string) {
	b := s.box(id) // the token was checked: it is there, unless killed since
	if b == nil {
		writeUnaryError(w, rpcErrorf(codeNotFound, "sandbox %q is not running", id))
		return
	}
	switch path {
	case "/process.Process/Start":
		s.start(w, r, b)
		return
	case "/process.Process/Connect":
		s.reattach(w, r, b)
		return
	case "/filesystem.Filesystem/WatchDir":
		s.watchDir(w, r, b)
		return
	}
	if streams[path] {
		st := newEventStream(w)
		st.end(rpcErrorf(codeUnimplemented, "%s is not built yet in agentsandbox's E2B transport (docs/e2b.md)", path))
		return
	}
	h, ok := unary[path]
	if !ok {
		writeUnaryError(w, rpcErrorf(codeUnimplemented, "%s is not built yet in agentsandbox's E2B transport (docs/e2b.md)", path))
		return
	}
	v, err := h(s, r.Context(), b, r)
	s.logInternal(r, err)
	if err != nil {
		if c := sandboxes.CodeOf(err); (c == sandboxes.CodeNotFound || c == sandboxes.CodeConflict) && s.stopped(r.Context(), b) {
			err = rpcErrorf(codeUnavailable, "sandbox %s is not running", b.id)
		}
		writeUnaryError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, unaryType, v)
}

// stopped says whether b's sandbox is no longer running (then it is
// forgotten).
func (s *Service) stopped(ctx context.Context, b *box) bool {
	info, err := s.m.Get(ctx, b.id)
	if (err == nil && info.State == sandboxes.StateRunning) || (err != nil && sandboxes.CodeOf(err) != sandboxes.CodeNotFound) {
		return false
	}
	s.forget(b.id)
	return true
}

// eventStream writes a server stream's envelopes, from more than one
// goroutine (events and keepalives).
type eventStream struct {
	w       http.ResponseWriter
	mu      sync.Mutex
	started bool
	ended   bool  // the end-of-stream envelope is written
	err     error // of a write: the client is gone
}

func newEventStream(w http.ResponseWriter) *eventStream { return &eventStream{w: w} }

func (st *eventStream) write(flags byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err != nil {
		return st.err
	}
	if st.ended {
		return errors.New("the stream has ended")
	}
	st.ended = flags&flagEndStream != 0
	if !st.started {
		st.started = true
		st.w.Header().Set("Content-Type", streamType)
		st.w.WriteHeader(http.StatusOK)
	}
	if _, err := st.w.Write(appendEnvelope(nil, flags, b)); err != nil {
		st.err = err
		return err
	}
	if err := http.NewResponseController(st.w).Flush(); err != nil {
		st.err = err
	}
	return st.err
}

func (st *eventStream) send(ev processEvent) error {
	return st.write(0, startResponse{Event: ev})
}

// end ends the stream, with err's Connect error if err is not nil.
func (st *eventStream) end(err error) {
	var e endStream
	if err != nil {
		e.Error = asRPCError(err)
	}
	st.write(flagEndStream, e)
}

// keepalives sends a keepalive event every interval until stop is
// closed (the SDK asks with Keepalive-Ping-Interval, in seconds).
func (st *eventStream) keepalives(r *http.Request, stop <-chan struct{}) {
	n, err := strconv.Atoi(r.Header.Get("Keepalive-Ping-Interval"))
	if err != nil || n < 1 {
		return
	}
	t := time.NewTicker(time.Duration(n) * time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if st.send(processEvent{Keepalive: &struct{}{}}) != nil {
				return
			}
		}
	}
}

// start is process.Process/Start: the command runs in the background
// (it outlives the stream) and the stream follows its output to its end.
// Connect-Timeout-Ms is the command's timeout: it is killed then.
func (s *Service) start(w http.ResponseWriter, r *http.Request, b *box) {
	st := newEventStream(w)
	var req startRequest
	if err := readStreamRequest(r, &req); err != nil {
		st.end(err)
		return
	}
	xr, err := s.execRequest(r, req)
	if err != nil {
		st.end(err)
		return
	}
	info, err := s.m.Exec(r.Context(), b.id, xr, nil)
	if err != nil {
		st.end(err)
		return
	}
	p := b.add(info.ID, req)
	if err := st.send(processEvent{Start: &startEvent{Pid: p.pid}}); err != nil {
		return // the client is gone; the command goes on
	}
	s.follow(r, st, b, p, 0, 0)
}

// processConnectRequest is process.ConnectRequest.
type processConnectRequest struct {
	Process processSelector `json:"process"`
}

// reattach is process.Process/Connect: a running command reattached by
// pid or tag, its output from now on (as envd's: what came before is not
// sent again), to its end. A command that has ended is not found.
func (s *Service) reattach(w http.ResponseWriter, r *http.Request, b *box) {
	st := newEventStream(w)
	var req processConnectRequest
	if err := readStreamRequest(r, &req); err != nil {
		st.end(err)
		return
	}
	p, err := b.find(req.Process)
	if err != nil {
		st.end(err)
		return
	}
	x, err := s.m.GetExec(r.Context(), b.id, p.execID)
	if err != nil {
		st.end(err)
		return
	}
	if !x.Running {
		st.end(rpcErrorf(codeNotFound, "process %d has ended", p.pid))
		return
	}
	if err := st.send(processEvent{Start: &startEvent{Pid: p.pid}}); err != nil {
		return
	}
	s.follow(r, st, b, p, x.StdoutBytes, x.StderrBytes)
}

// follow streams the output of p's exec, from the given offsets, to its
// end.
func (s *Service) follow(r *http.Request, st *eventStream, b *box, p *proc, stdoutFrom, stderrFrom int64) {
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		st.keepalives(r, stop)
	}()
	ended := false
	err := s.m.Output(r.Context(), b.id, p.execID, stdoutFrom, stderrFrom, true, func(ev sandboxes.ExecEvent) error {
		switch ev.Type {
		case sandboxes.EventStdout, sandboxes.EventStderr:
			data := ev.Base64
			if data == nil {
				data = []byte(ev.Text)
			}
			d := &dataEvent{Stdout: data}
			if ev.Type == sandboxes.EventStderr {
				d = &dataEvent{Stderr: data}
			} else if p.pty {
				d = &dataEvent{PTY: data}
			}
			return st.send(processEvent{Data: d})
		case sandboxes.EventGap:
			msg := fmt.Sprintf("[agentsandbox: %d bytes of %s are no longer kept]\n", ev.Next-ev.Offset, ev.Stream)
			return st.send(processEvent{Data: &dataEvent{Stderr: []byte(msg)}})
		case sandboxes.EventExit:
			ended = true
			return st.send(processEvent{End: endOf(ev.Exit)})
		case sandboxes.EventError:
			ended = true
			msg := ev.Error
			return st.send(processEvent{End: &endEvent{ExitCode: -1, Status: "error", Error: &msg}})
		}
		return nil
	})
	close(stop)
	<-stopped // no keepalive after the end
	s.logInternal(r, err)
	if err == nil && !ended {
		err = rpcErrorf(codeInternal, "the output of process %d ended without its exit", p.pid)
	}
	st.end(err)
}

// endOf is an exit as envd reports it: "exit status N", or for a signal
// exit code -1, exited false and "signal: killed" (Go's wording, envd's).
func endOf(x *sandboxes.ExitStatus) *endEvent {
	if x == nil {
		return &endEvent{ExitCode: -1, Status: "unknown"}
	}
	if x.Signal != "" {
		status := "signal: " + x.Signal
		if n := unix.SignalNum(x.Signal); n != 0 {
			status = "signal: " + n.String()
		}
		e := &endEvent{ExitCode: -1, Status: status}
		if x.TimedOut {
			msg := "the command's timeout (Connect-Timeout-Ms, the SDK's timeoutMs) passed: it was killed"
			e.Error = &msg
		}
		return e
	}
	return &endEvent{ExitCode: int32(x.ExitCode), Exited: true, Status: "exit status " + strconv.Itoa(x.ExitCode)}
}

// execRequest is the Manager's exec of a Start: its argv, env and cwd
// (in the sandbox's view, relative to the home, the workspace) and its
// timeout.
func (s *Service) execRequest(r *http.Request, req startRequest) (sandboxes.ExecRequest, error) {
	switch {
	case req.Process.Cmd == "":
		return sandboxes.ExecRequest{}, rpcErrorf(codeInvalidArgument, "process.cmd is empty: name the program to run")
	}
	timeout, err := timeoutOf(r)
	if err != nil {
		return sandboxes.ExecRequest{}, err
	}
	// HOME is the workspace, where the files API's ~/ is, unless the
	// client says otherwise.
	env := map[string]string{"HOME": sandboxWorkspace}
	for k, v := range req.Process.Envs {
		env[k] = v
	}
	xr := sandboxes.ExecRequest{Argv: append([]string{req.Process.Cmd}, req.Process.Args...), Env: env,
		Timeout: sandboxes.Duration(timeout), Background: true, StdinOpen: req.Stdin != nil && *req.Stdin}
	if xr.PTY, err = ptyOf(req); err != nil {
		return sandboxes.ExecRequest{}, err
	}
	if req.Process.Cwd != nil && *req.Process.Cwd != "" {
		rel, err := workspacePath(*req.Process.Cwd)
		if err != nil {
			return sandboxes.ExecRequest{}, err
		}
		xr.Cwd = rel
	}
	return xr, nil
}

// add gives exec execID the box's next pid.
func (b *box) add(execID string, req startRequest) *proc {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	p := &proc{pid: b.next, execID: execID, config: req.Process, tag: req.Tag, pty: req.PTY != nil}
	b.procs[p.pid] = p
	return p
}

// find is the process a selector names.
func (b *box) find(sel processSelector) (*proc, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case sel.Pid != nil:
		if p := b.procs[*sel.Pid]; p != nil {
			return p, nil
		}
		return nil, rpcErrorf(codeNotFound, "process with pid %d not found in sandbox %s", *sel.Pid, b.id)
	case sel.Tag != nil:
		for _, p := range b.procs {
			if p.tag != nil && *p.tag == *sel.Tag {
				return p, nil
			}
		}
		return nil, rpcErrorf(codeNotFound, "process with tag %q not found in sandbox %s", *sel.Tag, b.id)
	}
	return nil, rpcErrorf(codeInvalidArgument, "process: give a pid or a tag")
}

// listProcesses is process.Process/List: the commands started through
// envd that still run.
func (s *Service) listProcesses(ctx context.Context, b *box, r *http.Request) (any, error) {
	if err := readUnary(r, &struct{}{}); err != nil {
		return nil, err
	}
	b.mu.Lock()
	procs := make([]*proc, 0, len(b.procs))
	for _, p := range b.procs {
		procs = append(procs, p)
	}
	b.mu.Unlock()
	sort.Slice(procs, func(i, j int) bool { return procs[i].pid < procs[j].pid })
	out := listResponse{Processes: []processInfo{}}
	for _, p := range procs {
		x, err := s.m.GetExec(ctx, b.id, p.execID)
		if err != nil {
			return nil, err
		}
		if x.Running {
			out.Processes = append(out.Processes, processInfo{Config: p.config, Pid: p.pid, Tag: p.tag})
		}
	}
	return out, nil
}

// sendSignal is process.Process/SendSignal: SIGKILL or SIGTERM to a
// running command (one that has ended is not found, as in envd).
func (s *Service) sendSignal(ctx context.Context, b *box, r *http.Request) (any, error) {
	var req sendSignalRequest
	if err := readUnary(r, &req); err != nil {
		return nil, err
	}
	name, ok := req.Signal.name()
	if !ok {
		return nil, rpcErrorf(codeInvalidArgument, "signal %d: want SIGNAL_SIGKILL or SIGNAL_SIGTERM", req.Signal)
	}
	p, err := b.find(req.Process)
	if err != nil {
		return nil, err
	}
	x, err := s.m.GetExec(ctx, b.id, p.execID)
	if err != nil {
		return nil, err
	}
	if !x.Running {
		return nil, rpcErrorf(codeNotFound, "process %d has ended", p.pid)
	}
	if err := s.m.Signal(ctx, b.id, p.execID, name); err != nil {
		if sandboxes.CodeOf(err) == sandboxes.CodeConflict {
			return nil, rpcErrorf(codeNotFound, "process %d has ended", p.pid)
		}
		return nil, err
	}
	return struct{}{}, nil
}
