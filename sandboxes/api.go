// Package sandboxes is what `agentsandbox serve` offers agents: long-lived
// sandboxes to run commands in, read and write files in, and kill, under
// policy, with every action appended to the sandbox's execution record.
//
// This file is the contract between the server (package server: REST and
// MCP) and the Manager that runs the sandboxes; both sides and the
// clients (clients/python, clients/js, the sandbox CLI commands) speak
// these types as JSON. Durations are Go duration strings ("10m"), times
// RFC 3339, bytes of files are sent raw (not in JSON), and command output
// is text when it is valid UTF-8, base64 otherwise.
package sandboxes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Spec is what a sandbox is created from: the fields of a workflow step
// (isolation, packages, resources with the workflow's units, network,
// env), or a step of a workflow file used as a template ("FILE#STEP"), and
// its lifetime and labels.
type Spec struct {
	// Template names a workflow step, "path/to/workflow.yaml#step"; the
	// fields below, when set, override the step's.
	Template  string            `json:"template,omitempty"`
	Isolation string            `json:"isolation,omitempty"` // namespace (default), vm or auto
	Packages  []string          `json:"packages,omitempty"`
	Resources map[string]any    `json:"resources,omitempty"` // as in a workflow: {"memory": "1GiB", "vcpu": 2, "timeout": "1h", ...}
	Network   *Network          `json:"network,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	// TTL ends the sandbox this long after its creation (default 1h);
	// IdleTimeout ends it after this long without an exec or file action
	// (default 15m). Both can be extended (Extend).
	TTL         Duration          `json:"ttl,omitempty"`
	IdleTimeout Duration          `json:"idleTimeout,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	// FromSnapshot forks the sandbox from a snapshot this server took: its
	// workspace starts as the snapshot's.
	FromSnapshot string `json:"fromSnapshot,omitempty"`
}

// SnapshotInfo is a snapshot of a sandbox's workspace: a content-addressed
// tree (the NAR of /workspace) in the server's blob store. ID is the NAR
// hash, "sha256:<hex>"; the same workspace always gives the same ID.
type SnapshotInfo struct {
	ID      string    `json:"id"`
	Sandbox string    `json:"sandbox"`
	Label   string    `json:"label,omitempty"`
	Created time.Time `json:"created"`
	Size    int64     `json:"size"` // bytes of the NAR
}

// SnapshotRequest takes a snapshot; RestoreRequest rolls a sandbox back to one.
type SnapshotRequest struct {
	Label string `json:"label,omitempty"`
}

type RestoreRequest struct {
	Snapshot string `json:"snapshot"`
}

// Network is a step's network: the hosts, *.domains and CIDR:ports it may
// reach (docs/network.md).
type Network struct {
	Allow []string `json:"allow"`
}

// State of a sandbox.
type State string

const (
	StateRunning State = "running"
	StateStopped State = "stopped" // killed, expired, or its sandbox ended; the record is closed
)

// Info is a sandbox as the server shows it.
type Info struct {
	ID          string            `json:"id"`
	State       State             `json:"state"`
	Isolation   string            `json:"isolation"`
	Labels      map[string]string `json:"labels"`
	Created     time.Time         `json:"created"`
	ExpiresAt   time.Time         `json:"expiresAt"`
	IdleTimeout Duration          `json:"idleTimeout"`
	LastActive  time.Time         `json:"lastActive"`
	// Step is the canonical workflow step the sandbox runs (the spec
	// parsed and defaulted), as JSON.
	Step any `json:"step"`
	// Usage is live from the sandbox's cgroup and its egress proxy.
	Usage Usage `json:"usage"`
	// Record is the sandbox's execution record once it is closed.
	Record string `json:"record,omitempty"`
	// Ended says why a stopped sandbox stopped: "killed", "expired",
	// "idle", "exited: ..." or "server stopped".
	Ended string `json:"ended,omitempty"`
	// Owner is the identity the sandbox belongs to (identity.go): only it
	// and admins see it.
	Owner string `json:"owner,omitempty"`
}

// Usage is what a sandbox has used so far.
type Usage struct {
	CPUTimeNs       int64 `json:"cpuTimeNs"`
	MemoryBytes     int64 `json:"memoryBytes"`
	PeakMemoryBytes int64 `json:"peakMemoryBytes"`
	Pids            int64 `json:"pids"`
	BytesOut        int64 `json:"bytesOut"` // through the egress proxy
	BytesIn         int64 `json:"bytesIn"`
}

// ExecRequest is one command to run in a sandbox. Exactly one of Argv and
// Shell is set: Argv is run as is (Argv[0] looked up in PATH), Shell with
// /bin/sh -c.
type ExecRequest struct {
	Argv  []string          `json:"argv,omitempty"`
	Shell string            `json:"shell,omitempty"`
	Cwd   string            `json:"cwd,omitempty"` // relative to /workspace, or absolute in the sandbox
	Env   map[string]string `json:"env,omitempty"` // over the sandbox's env
	// Timeout kills the command (its whole process group) after this
	// long; 0 is the sandbox's own timeout.
	Timeout Duration `json:"timeout,omitempty"`
	// Stdin is given to the command whole, then closed; without it the
	// command reads /dev/null.
	Stdin *string `json:"stdin,omitempty"`
	// StdinOpen keeps the command's stdin open: the caller writes to it
	// with Manager.WriteStdin and ends it with Manager.CloseStdin. It
	// goes with Background, not with Stdin.
	StdinOpen bool `json:"stdinOpen,omitempty"`
	// PTY runs the command on a new pseudo-terminal of this size, made in
	// the sandbox's own devpts (never one of the host's), as its
	// controlling terminal: all it shows is its stdout, its stdin is
	// open (StdinOpen is implied: WriteStdin types into the terminal),
	// and ResizePTY changes the size.
	PTY *PTYSize `json:"pty,omitempty"`
	// Background returns at once with the exec's id; its output is kept
	// (bounded) to be read later, waited for, signalled or reattached.
	Background bool `json:"background,omitempty"`
}

// PTYSize is a terminal's size in characters, each from 1 to MaxPTYSide.
type PTYSize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// MaxPTYSide bounds a pty's columns and rows.
const MaxPTYSide = 4096

func (z PTYSize) check() error {
	if z.Cols < 1 || z.Rows < 1 || z.Cols > MaxPTYSide || z.Rows > MaxPTYSide {
		return Errorf(CodeBadRequest, "pty size %dx%d: cols and rows must each be from 1 to %d", z.Cols, z.Rows, MaxPTYSide)
	}
	return nil
}

// Event types of an exec's stream.
const (
	EventStarted = "started"
	EventStdout  = "stdout"
	EventStderr  = "stderr"
	EventExit    = "exit"
	EventError   = "error" // the command could not start; no exit follows
	// EventGap says bytes of a stream were not sent because the server no
	// longer has them (Output, below); the stream goes on after them.
	EventGap = "gap"
)

// ExecEvent is one event of an exec's output stream (NDJSON on the wire).
type ExecEvent struct {
	Type   string    `json:"type"`
	ExecID string    `json:"execId"`
	Time   time.Time `json:"time"`
	// stdout, stderr: Offset is where Text (or Base64, for bytes that are
	// not UTF-8) starts in that stream. gap: the bytes [Offset, Next) of
	// Stream ("stdout" or "stderr") are lost to this reader; its next
	// output event of that stream starts at Next.
	Offset int64  `json:"offset,omitempty"`
	Text   string `json:"text,omitempty"`
	Base64 []byte `json:"base64,omitempty"`
	Stream string `json:"stream,omitempty"`
	Next   int64  `json:"next,omitempty"`
	// exit.
	Exit *ExitStatus `json:"exit,omitempty"`
	// error.
	Error string `json:"error,omitempty"`
}

// ExitStatus is how a command ended. A non-zero exit is data, not an
// error.
type ExitStatus struct {
	ExitCode   int    `json:"exitCode"`
	Signal     string `json:"signal,omitempty"`
	TimedOut   bool   `json:"timedOut,omitempty"`
	DurationMS int64  `json:"durationMs"`
	CPUTimeNs  int64  `json:"cpuTimeNs"`
	MaxRSS     int64  `json:"maxRssBytes"`
}

// ExecInfo is an exec as the server keeps it (background or finished).
type ExecInfo struct {
	ID      string `json:"id"`
	Sandbox string `json:"sandbox"`
	// Request is the exec's request, without its stdin (which is not
	// kept).
	Request ExecRequest `json:"request"`
	Started time.Time   `json:"started"`
	Running bool        `json:"running"`
	Exit    *ExitStatus `json:"exit,omitempty"`
	// StdoutBytes and StderrBytes count all the output so far. The server
	// keeps the first DefaultLogLimit bytes of each (its LogLimit) on
	// disk, and while the command runs the last OutputWindow in memory.
	StdoutBytes int64 `json:"stdoutBytes"`
	StderrBytes int64 `json:"stderrBytes"`
}

// DefaultLogLimit is how much of each stream of an exec the server keeps
// unless Options.LogLimit says otherwise: written to disk as it comes,
// stored in the record, served to any reader later. It is the bound of a
// file the API moves (MaxFileBytes).
const DefaultLogLimit = MaxFileBytes

// FileInfo describes one file or directory in a sandbox's workspace.
type FileInfo struct {
	Path    string    `json:"path"` // workspace-relative, slash-separated
	Type    string    `json:"type"` // "file", "dir", "symlink" or "other"
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"` // octal permission bits, such as "0644"
	ModTime time.Time `json:"modTime"`
	// Owner and Group are the entry's owner as the sandbox names them:
	// "user" for the job's uid and gid, "root" for 0, the number
	// otherwise.
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
	// SymlinkTarget is a symlink's target as written, never resolved.
	SymlinkTarget string `json:"symlinkTarget,omitempty"`
	// SHA256 is the hex SHA-256 of a file just written (Put) or of the
	// bytes of one just read (Get: the server sends it as the trailer
	// X-Agentsandbox-Sha256).
	SHA256 string `json:"sha256,omitempty"`
}

// MaxFileBytes bounds one file put or got through the API.
const MaxFileBytes = 256 << 20

// MaxPathBytes and MaxNameBytes bound a workspace path of the files API:
// /workspace/PATH fits Linux's PATH_MAX (4,096 bytes with its NUL), and
// each name on it NAME_MAX (255 bytes). CheckPathLength checks both.
const (
	MaxPathBytes = 4096 - 1 - len("/workspace/")
	MaxNameBytes = 255
)

// CheckPathLength refuses a workspace path (slash-separated) longer than
// MaxPathBytes or with a name longer than MaxNameBytes, with a message
// that quotes only its start.
func CheckPathLength(p string) error { return checkLength("path", p) }

// checkLength is CheckPathLength for any path the API takes (what says
// which: "path", "template file"), with the same limits.
func checkLength(what, p string) error {
	if len(p) > MaxPathBytes {
		return Errorf(CodeBadRequest, "%s %s is %d bytes long: the most is %d bytes", what, quoteStart(p), len(p), MaxPathBytes)
	}
	for _, name := range strings.Split(p, "/") {
		if len(name) > MaxNameBytes {
			return Errorf(CodeBadRequest, "%s %s has a name of %d bytes (%s): the most is %d bytes, Linux's NAME_MAX", what, quoteStart(p), len(name), quoteStart(name), MaxNameBytes)
		}
	}
	return nil
}

// quoteStart quotes s, or its first 40 bytes and an ellipsis when it is
// longer: an error message does not echo kilobytes back.
func quoteStart(s string) string {
	const keep = 40
	if len(s) <= keep {
		return strconv.Quote(s)
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
}

// Manager runs sandboxes. The server calls it; every method is safe for
// concurrent use. Errors are *Error (or wrap one) so that the server can
// answer with the right status and code.
type Manager interface {
	Create(ctx context.Context, s Spec) (Info, error)
	Get(ctx context.Context, id string) (Info, error)
	// List returns the sandboxes whose labels include every given label.
	List(ctx context.Context, labels map[string]string) ([]Info, error)
	// Extend moves the sandbox's expiry to now+ttl and sets its idle
	// timeout, when those are non-zero.
	Extend(ctx context.Context, id string, ttl, idle time.Duration) (Info, error)
	// Kill stops the sandbox and closes its record.
	Kill(ctx context.Context, id string) (Info, error)

	// Exec runs a command. In the foreground it calls emit for each event
	// in order until the exit (or an error event) and returns the exec's
	// info; a failing emit (the client went away) kills the command.
	// With Background it returns as soon as the command has started.
	Exec(ctx context.Context, id string, r ExecRequest, emit func(ExecEvent) error) (ExecInfo, error)
	GetExec(ctx context.Context, id, execID string) (ExecInfo, error)
	// Output replays an exec's kept output from the given offsets, then
	// (follow) its further events until the exit. Bytes it no longer has
	// (past the log limit and no longer in memory) are a gap event, never
	// skipped silently; an offset past the end waits for that offset.
	Output(ctx context.Context, id, execID string, stdoutFrom, stderrFrom int64, follow bool, emit func(ExecEvent) error) error
	Signal(ctx context.Context, id, execID, signal string) error
	// WriteStdin writes data (at most MaxStdinWrite bytes) to the stdin
	// of a running exec started with StdinOpen; CloseStdin ends that
	// stdin once what was written is read.
	WriteStdin(ctx context.Context, id, execID string, data []byte) error
	CloseStdin(ctx context.Context, id, execID string) error
	// ResizePTY sets the size of the pty of a running exec started with
	// PTY.
	ResizePTY(ctx context.Context, id, execID string, size PTYSize) error

	PutFile(ctx context.Context, id, path string, r io.Reader, mode uint32) (FileInfo, error)
	// GetFile writes the file to w, at most MaxFileBytes.
	GetFile(ctx context.Context, id, path string, w io.Writer) (FileInfo, error)
	Stat(ctx context.Context, id, path string) (FileInfo, error)
	ListFiles(ctx context.Context, id, dir string) ([]FileInfo, error)
	RemoveFile(ctx context.Context, id, path string, recursive bool) error
	MakeDir(ctx context.Context, id, path string, mode uint32) (FileInfo, error)
	Move(ctx context.Context, id, from, to string) (FileInfo, error)
	// WatchDir calls emit for each change under dir (beneath it too with
	// recursive) until ctx ends, the sandbox stops or emit fails; ready
	// is called once the watch is in place.
	WatchDir(ctx context.Context, id, dir string, recursive bool, ready func(), emit func(FileEvent) error) error

	// Snapshot stores the workspace as a content-addressed tree;
	// Snapshots lists those taken of the sandbox; Restore replaces the
	// workspace with a snapshot's (no command may be running).
	Snapshot(ctx context.Context, id, label string) (SnapshotInfo, error)
	Snapshots(ctx context.Context, id string) ([]SnapshotInfo, error)
	Restore(ctx context.Context, id, snapshot string) (Info, error)

	// Close stops every sandbox (the server is shutting down).
	Close(ctx context.Context) error
}

// Code is an error's stable, machine-readable kind.
type Code string

const (
	CodeBadRequest Code = "bad_request"       // 400
	CodeNotFound   Code = "not_found"         // 404
	CodeConflict   Code = "conflict"          // 409: the sandbox is stopped, the path is a directory, ...
	CodeTooLarge   Code = "too_large"         // 413
	CodeDenied     Code = "policy_denied"     // 403: the policy refused the action
	CodeLimit      Code = "limit_exceeded"    // 429: too many sandboxes or requests
	CodeInternal   Code = "internal"          // 500: the host failed; the message says what
	CodeAuth       Code = "unauthorized"      // 401
	CodeStopped    Code = "server_stopping"   // 503
	CodeUnsupport  Code = "not_supported_yet" // 501: a part of the API this server does not offer yet
	CodeTimeout    Code = "timeout"           // 408: the request's body stopped arriving
)

// Error is a failure with a stable code and a message a person can act on.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// Decision is the policy decision id when the policy refused.
	Decision string `json:"decision,omitempty"`
	Err      error  `json:"-"`
}

func (e *Error) Error() string { return e.Message }
func (e *Error) Unwrap() error { return e.Err }

// Errorf makes an *Error.
func Errorf(code Code, format string, a ...any) *Error {
	err := fmt.Errorf(format, a...)
	return &Error{Code: code, Message: err.Error(), Err: errors.Unwrap(err)}
}

// CodeOf is err's code: CodeInternal for an error that is not an *Error.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// Duration is a time.Duration that is a Go duration string in JSON.
type Duration time.Duration

func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration %q: want a number with a unit, such as \"90s\", \"10m\" or \"1h\"", b)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", b)
	}
	*d = Duration(v)
	return nil
}

// D is d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }
