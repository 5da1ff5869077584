// Package guest is the contract between the host and the guest agent: the
// job and result documents, the control directory's file names, the share
// tags and mount points, the console markers. It is pure (no syscalls); the
// agent that speaks it is guest/agent.
//
// The host writes a Job as job.json into a control directory; the agent (in a
// VM, or as PID 1 of a namespace jail) runs it, sends its output to the
// console and to log files in that directory, writes a Result as result.json,
// syncs, and powers off or exits. The host reads the job's status from
// result.json only, never from the hypervisor's exit status. The protocol is
// versioned by ProtocolVersion and documented in docs/guest-protocol.md.
package guest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"
)

// ProtocolVersion is bumped on any incompatible change to Job or Result.
const ProtocolVersion = 1

// Names of the files in the control directory.
const (
	JobFile    = "job.json"
	ResultFile = "result.json"
	StdoutFile = "stdout.log"
	StderrFile = "stderr.log"
)

// Share tags and guest mount points. The host shares the control directory
// and the workspace under these tags; the agent mounts them when it is PID 1.
const (
	ControlTag       = "asb-control"
	WorkspaceTag     = "asb-workspace"
	ControlMount     = "/run/agentsandbox"
	WorkspaceMount   = "/workspace"
	DefaultUID       = 65534 // nobody: the job's user unless the Job says otherwise
	DefaultGID       = 65534
	ConsoleStartLine = "agentsandbox-guest: job started"
	// ConsoleEndLine starts the console line the agent prints when the job
	// has ended and result.json is written (or could not be written); a
	// short summary follows it on the same line.
	ConsoleEndLine = "agentsandbox-guest: job finished"
	// ConsoleErrorLine starts the line the agent prints, as PID 1, when it
	// cannot set the guest up or run the job, just before it powers off.
	ConsoleErrorLine = "agentsandbox-guest: error:"
)

// Job is job.json: what to run, as whom, and for how long.
type Job struct {
	Version int      `json:"version"`
	Step    string   `json:"step"`
	Command []string `json:"command"` // argv; Command[0] is looked up in PATH from Env
	Env     []string `json:"env"`     // KEY=VALUE, sorted
	Workdir string   `json:"workdir"`
	UID     int      `json:"uid"`
	GID     int      `json:"gid"`
	// TimeoutMS, when positive, is enforced by the agent too; the host keeps
	// its own, longer deadline for a guest that stops answering.
	TimeoutMS int64 `json:"timeoutMs"`
	// Session asks for a long-lived sandbox instead of one command:
	// Command is empty, TimeoutMS 0 (each command's timeout is in its
	// request), and the agent serves commands on SessionSocket until it
	// is stopped (session.go).
	Session bool `json:"session,omitempty"`
}

// Result is result.json: how the job ended.
type Result struct {
	Version  int       `json:"version"`
	Step     string    `json:"step"`
	ExitCode int       `json:"exitCode"`         // -1 when killed by a signal or never started
	Signal   string    `json:"signal,omitempty"` // such as "SIGKILL"
	TimedOut bool      `json:"timedOut,omitempty"`
	Error    string    `json:"error,omitempty"` // the agent could not start or watch the job
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Rusage   Rusage    `json:"rusage"`
}

// MaxResultSize bounds result.json as the host reads it. The agent writes
// well under 1 KiB plus the job's error text; anything bigger did not come
// from a working agent.
const MaxResultSize = 64 << 10

// ParseResult decodes result.json strictly, as the host must read anything
// from inside a sandbox: exactly one JSON object, of this protocol version,
// with no field Result does not have. Bound the bytes before calling it
// (MaxResultSize).
func ParseResult(b []byte) (Result, error) {
	var res Result
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		return Result{}, fmt.Errorf("decode result: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Result{}, errors.New("decode result: more than one JSON value")
	}
	if res.Version != ProtocolVersion {
		return Result{}, fmt.Errorf("decode result: protocol version %d, the host speaks version %d", res.Version, ProtocolVersion)
	}
	return res, nil
}

// Rusage is the job's resource use as the guest kernel counted it.
type Rusage struct {
	UserMS    int64 `json:"userMs"`
	SystemMS  int64 `json:"systemMs"`
	MaxRSSKiB int64 `json:"maxRssKiB"`
}

// Succeeded reports whether the job ran and exited 0.
func (r Result) Succeeded() bool {
	return r.Error == "" && !r.TimedOut && r.Signal == "" && r.ExitCode == 0
}

// Duration is the job's wall time.
func (r Result) Duration() time.Duration { return r.Finished.Sub(r.Started) }

// KillGrace is how long the agent waits after SIGTERM to the job's process
// group before it sends SIGKILL, on a timeout or a cancelled context.
const KillGrace = 2 * time.Second

// Validate checks a job before it runs.
func (j Job) Validate() error {
	if j.Version != ProtocolVersion {
		return fmt.Errorf("protocol version %d, this agent speaks version %d: use an agent built from the same agentsandbox release as the host", j.Version, ProtocolVersion)
	}
	switch {
	case j.Session && len(j.Command) > 0:
		return errors.New("a session job has no command: commands arrive on the session socket")
	case !j.Session && (len(j.Command) == 0 || j.Command[0] == ""):
		return errors.New("command is empty")
	}
	if err := checkCommand(j.Command); err != nil {
		return err
	}
	if err := checkEnv(j.Env); err != nil {
		return err
	}
	if !filepath.IsAbs(j.Workdir) {
		return fmt.Errorf("workdir %q is not an absolute path", j.Workdir)
	}
	if j.UID < 0 || j.GID < 0 {
		return fmt.Errorf("uid %d / gid %d: must not be negative", j.UID, j.GID)
	}
	if j.TimeoutMS < 0 {
		return fmt.Errorf("timeoutMs %d is negative", j.TimeoutMS)
	}
	if j.Session && j.TimeoutMS > 0 {
		return fmt.Errorf("a session job has no timeout (timeoutMs %d): the sandbox lives until it is stopped, and each command's timeout comes in its exec request", j.TimeoutMS)
	}
	return nil
}

// checkCommand checks the arguments of a Job's or an exec request's
// command.
func checkCommand(argv []string) error {
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("command argument %q contains a NUL byte", a)
		}
	}
	return nil
}

// checkEnv checks a Job's or an exec request's environment: KEY=VALUE
// entries, no NUL byte, each key once.
func checkEnv(env []string) error {
	seen := make(map[string]bool, len(env))
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("env entry %q is not KEY=VALUE", kv)
		}
		if strings.IndexByte(kv, 0) >= 0 {
			return fmt.Errorf("env entry %q contains a NUL byte", k)
		}
		if seen[k] {
			return fmt.Errorf("env key %q appears twice", k)
		}
		seen[k] = true
	}
	return nil
}
