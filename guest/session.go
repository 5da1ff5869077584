package guest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// A session is a long-lived sandbox: the agent does not run one job and
// exit, it stays PID 1 and runs commands on request, many times, in the
// same sandbox (agentsandbox serve). The host starts it with a Job whose
// Session is true (Command is then empty), and the agent listens on the
// unix socket SessionSocket in the control directory, which only root can
// reach (the job runs as another user and the directory is 0700).
//
// Each connection to the socket carries one exec: the host sends one
// SessionRequest with Op "exec", then any number of "stdin", "close_stdin"
// and "signal" requests; the agent answers with SessionEvents: "started"
// (or "error"), "stdout" and "stderr" chunks in order, and last "exit".
// When the command exits, the agent kills what it left in its process
// group, as it does for a job; when the host closes the connection before
// "exit", it kills the whole group. Frames are JSON lines, each at most
// MaxSessionLine bytes. A connection whose first request has Op "ping"
// gets one "pong" event: the agent is up.
const (
	// SessionSocket is the socket's name in the control directory.
	SessionSocket = "session.sock"
	// SessionPort is the name of the virtio-serial port a VM's agent
	// serves sessions on instead (a unix socket cannot cross the 9p
	// share): each stream of a guest/mux session over it is one
	// connection (docs/guest-protocol.md, "The VM transport").
	SessionPort = "org.agentsandbox.session"
	// MaxSessionLine bounds one JSON line of the session protocol.
	MaxSessionLine = 1 << 20
	// MaxSessionChunk bounds the data of one stdin, stdout or stderr
	// event, before base64.
	MaxSessionChunk = 64 << 10
)

// Ops of a SessionRequest.
const (
	OpPing       = "ping"
	OpExec       = "exec"
	OpStdin      = "stdin"
	OpCloseStdin = "close_stdin"
	OpSignal     = "signal"
	// OpResize sets the size of the pty of a command started with PTY.
	OpResize = "resize"
)

// Types of a SessionEvent.
const (
	EventPong    = "pong"
	EventStarted = "started"
	EventStdout  = "stdout"
	EventStderr  = "stderr"
	EventExit    = "exit"
	EventError   = "error"
)

// SessionRequest is one host → agent frame.
type SessionRequest struct {
	Op string `json:"op"`
	// exec: the command, like a Job's (Command[0] looked up in PATH from
	// Env), run as UID:GID in Workdir (relative to the workspace, or
	// absolute inside the sandbox). TimeoutMS, when positive, kills the
	// command's process group once it has run that long.
	Command   []string `json:"command,omitempty"`
	Env       []string `json:"env,omitempty"`
	Workdir   string   `json:"workdir,omitempty"`
	UID       int      `json:"uid,omitempty"`
	GID       int      `json:"gid,omitempty"`
	TimeoutMS int64    `json:"timeoutMs,omitempty"`
	// Stdin says the command reads stdin from this connection's "stdin"
	// requests; otherwise it reads /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// PTY, on exec, runs the command on a new pseudo-terminal of the
	// sandbox's own devpts (/dev/pts/ptmx) of that size, as its
	// controlling terminal (a new session): its stdin, stdout and stderr
	// are the terminal's, stdin ops write to it, and all its output
	// comes as stdout events. On resize: the terminal's new size.
	PTY *PTYSize `json:"pty,omitempty"`
	// stdin: Data is the next bytes.
	Data []byte `json:"data,omitempty"`
	// signal: Signal is a name such as "SIGTERM".
	Signal string `json:"signal,omitempty"`
}

// PTYSize is a terminal's size in characters.
type PTYSize struct {
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

// check refuses a size of zero (a terminal of no columns or rows).
func (z *PTYSize) check() error {
	if z == nil {
		return nil
	}
	if z.Cols == 0 || z.Rows == 0 {
		return fmt.Errorf("pty size %dx%d: cols and rows must be 1 or more", z.Cols, z.Rows)
	}
	return nil
}

// SessionEvent is one agent → host frame.
type SessionEvent struct {
	Type string `json:"type"`
	// started: the command's pid (in the sandbox's pid namespace).
	PID int `json:"pid,omitempty"`
	// stdout, stderr: the next bytes of that stream.
	Data []byte `json:"data,omitempty"`
	// exit: how the command ended, like a Result's.
	ExitCode int    `json:"exitCode"`
	Signal   string `json:"signal,omitempty"`
	TimedOut bool   `json:"timedOut,omitempty"`
	Rusage   Rusage `json:"rusage,omitzero"`
	// error: the command could not be started (or the request was
	// malformed); no exit follows.
	Error string `json:"error,omitempty"`
}

// SessionEncoder writes frames of the session protocol.
type SessionEncoder struct{ w io.Writer }

// NewSessionEncoder writes frames to w.
func NewSessionEncoder(w io.Writer) *SessionEncoder { return &SessionEncoder{w: w} }

// Encode writes v as one JSON line; a frame longer than MaxSessionLine is
// an error (split data into MaxSessionChunk pieces).
func (e *SessionEncoder) Encode(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b)+1 > MaxSessionLine {
		return fmt.Errorf("session frame of %d bytes is over the %d-byte limit", len(b), MaxSessionLine)
	}
	_, err = e.w.Write(append(b, '\n'))
	return err
}

// SessionDecoder reads frames of the session protocol, refusing lines
// over MaxSessionLine and unknown fields.
type SessionDecoder struct{ r *bufio.Reader }

// NewSessionDecoder reads frames from r.
func NewSessionDecoder(r io.Reader) *SessionDecoder {
	return &SessionDecoder{r: bufio.NewReaderSize(r, 64<<10)}
}

// ErrSessionLine is a frame over MaxSessionLine.
var ErrSessionLine = errors.New("session frame over the size limit")

// Decode reads the next frame into v; io.EOF at a clean end.
func (d *SessionDecoder) Decode(v any) error {
	var line []byte
	for {
		chunk, isPrefix, err := d.r.ReadLine()
		if err != nil {
			if err == io.EOF && len(line) > 0 {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		line = append(line, chunk...)
		if len(line) > MaxSessionLine {
			return ErrSessionLine
		}
		if !isPrefix {
			break
		}
	}
	if err := decodeStrict(line, v); err != nil {
		return fmt.Errorf("session frame: %w", err)
	}
	return nil
}

func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value on a line")
	}
	return nil
}

// Check is the one check of a session request, whatever its op: the host
// calls it before it sends a request (vmrunner.StartExec), the agent on
// every frame it reads. An exec request is checked as a Job is (Job.Validate
// shares the checks of its command and env), so that ExecJob's Job needs no
// second look.
func (q *SessionRequest) Check() error {
	switch q.Op {
	case OpPing, OpCloseStdin:
		return nil
	case OpStdin:
		if len(q.Data) > MaxSessionChunk {
			return fmt.Errorf("stdin chunk of %d bytes is over %d", len(q.Data), MaxSessionChunk)
		}
		return nil
	case OpSignal:
		if q.Signal == "" {
			return errors.New("signal request without a signal")
		}
		return nil
	case OpResize:
		if q.PTY == nil {
			return errors.New("resize request without a pty size")
		}
		return q.PTY.check()
	case OpExec:
		if len(q.Command) == 0 || q.Command[0] == "" {
			return errors.New("exec request without a command")
		}
		if err := checkCommand(q.Command); err != nil {
			return fmt.Errorf("exec request: %w", err)
		}
		if err := checkEnv(q.Env); err != nil {
			return fmt.Errorf("exec request: %w", err)
		}
		if err := q.PTY.check(); err != nil {
			return fmt.Errorf("exec request: %w", err)
		}
		if strings.IndexByte(q.Workdir, 0) >= 0 {
			return fmt.Errorf("exec request with workdir %q: it contains a NUL byte", q.Workdir)
		}
		if q.UID < 0 || q.GID < 0 {
			return fmt.Errorf("exec request with uid %d gid %d: want ids of 0 or more", q.UID, q.GID)
		}
		if q.TimeoutMS < 0 {
			return fmt.Errorf("exec request with a negative timeout %d ms", q.TimeoutMS)
		}
		return nil
	default:
		return fmt.Errorf("unknown session op %q", q.Op)
	}
}

// ExecJob is the Job an exec request runs as in the session started by
// session: the one place the request's defaults are applied, by the agent.
// Workdir is resolved (empty: WorkspaceMount; relative: beneath it;
// absolute: as is; cleaned). Command, Env, UID, GID and TimeoutMS are the
// request's own: the host fills Env (the sandbox's merged with the
// caller's), UID and GID (0 is root, so they have no default here) and the
// timeout (0: none). Call it on a request Check accepted.
func (q *SessionRequest) ExecJob(session Job) Job {
	dir := q.Workdir
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(WorkspaceMount, dir)
	}
	return Job{
		Version: ProtocolVersion, Step: session.Step,
		Command: q.Command, Env: q.Env, Workdir: filepath.Clean(dir),
		UID: q.UID, GID: q.GID, TimeoutMS: q.TimeoutMS,
	}
}
