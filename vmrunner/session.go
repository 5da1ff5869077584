package vmrunner

import (
	"context"

	"github.com/agentsandbox/agentsandbox/guest"
)

// A Session is a long-lived sandbox (agentsandbox serve): its agent stays
// PID 1 and runs commands on request over the session protocol
// (guest/session.go), until Stop. The namespace backend opens them, and
// the vm backend for qemu runners (over a virtio-serial channel).
type Session interface {
	// Exec starts one command; its events arrive on the returned exec.
	Exec(ctx context.Context, r guest.SessionRequest) (SessionExec, error)
	// Usage reads the sandbox's cgroup.
	Usage() (Usage, error)
	// Done is closed when the sandbox ended on its own (its init exited).
	Done() <-chan struct{}
	// Stop ends the sandbox and removes everything it held on the host,
	// egress included; safe after Done and more than once.
	Stop(ctx context.Context) error
}

// SessionExec is one running command of a session.
type SessionExec interface {
	// Events yields the command's events in order and is closed after
	// its exit (or error) event, or when the connection fails.
	Events() <-chan guest.SessionEvent
	WriteStdin(b []byte) error
	CloseStdin() error
	// Signal signals the command's process group ("SIGTERM", ...).
	Signal(name string) error
	// Close lets go of the command; one still running is killed.
	Close() error
}

// SessionBackend is a Backend that can also hold sessions. spec.Job has
// Session set and is already written to the control directory.
type SessionBackend interface {
	Backend
	OpenSession(ctx context.Context, spec StepSpec) (Session, error)
}
