package vmrunner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// The runtime contract: every step is a sandbox a Backend opens. A batch
// step (apply) is RunStep: Open, Wait for the job's end, Stop. A
// long-lived one (serve) is Open of a session job, any number of Execs,
// and Stop. Both open the same sandbox (state file, netns, cgroup, jail
// or VM, egress) and remove it the same way.
//
// The contract lives here, beside StepSpec and StepResult which it
// carries, rather than in a leaf package of its own: every backend and
// the engine already import vmrunner for those, and vmrunner imports
// nothing above the pure core and the guest protocol.

// Backend opens steps' sandboxes in one isolation level.
type Backend interface {
	Isolation() workflow.Isolation
	// Open creates the step's sandbox and starts the guest agent on the
	// job.json the caller wrote to spec.ControlDir. For a batch job
	// (spec.Job.Session false) the agent runs the job's command at once
	// and the sandbox ends with it (Wait). For a session job the agent
	// serves commands (Exec) until Stop, and Open returns once it
	// answers. The error is a sandbox or infrastructure failure (exit
	// status 5); when ctx is cancelled during Open, Open removes
	// everything it created and returns an error wrapping ctx.Err(). On
	// an error nothing is left; otherwise the caller must call Stop.
	Open(ctx context.Context, spec StepSpec) (Sandbox, error)
}

// A Sandbox is one open step. Its methods are safe for concurrent use,
// but Wait is called once, and Stop once Wait has returned or instead of
// it.
type Sandbox interface {
	// Exec starts one command of a session job; its events arrive on
	// the returned Exec. A batch job's sandbox refuses it
	// (ErrBatchExec): its agent runs the job's own command.
	Exec(ctx context.Context, r guest.SessionRequest) (Exec, error)
	// Wait waits until the sandbox ends (a batch job's command exits, is
	// killed at the host's deadline or for memory; a session is
	// stopped, or its agent ended) and returns the step's result. A job
	// that fails, times out or is OOM-killed is a StepResult, not an
	// error. When ctx is done first, Wait kills the step and returns an
	// error wrapping ctx.Err(); Stop still removes it.
	Wait(ctx context.Context) (StepResult, error)
	// Usage reads the sandbox's cgroup.
	Usage() (Usage, error)
	// Done is closed when the sandbox ended (its init exited).
	Done() <-chan struct{}
	// Stop ends the sandbox and removes everything it held on the host,
	// egress included; safe after Done and more than once (later calls
	// return the first's error). A sandbox still running is asked to end
	// (the agent kills its commands and writes result.json) and killed
	// after a grace, or at once when ctx is done.
	Stop(ctx context.Context) error
}

// Exec is one running command of a session.
type Exec interface {
	// Events yields the command's events in order and is closed after
	// its exit (or error) event, or when the connection fails.
	Events() <-chan guest.SessionEvent
	WriteStdin(b []byte) error
	CloseStdin() error
	// Signal signals the command's process group ("SIGTERM", ...).
	Signal(name string) error
	// Resize sets the size of the pty of a command started with one.
	Resize(size guest.PTYSize) error
	// Close lets go of the command; one still running is killed.
	Close() error
}

// ErrBatchExec is Exec on the sandbox of a batch job.
var ErrBatchExec = errors.New("the sandbox runs a batch job, whose agent runs the job's own command and serves no others: open it with a session job (Job.Session set, no command) to exec in it")

// RunStep runs a batch step: Open, Wait, Stop. The result is Wait's; an
// error of Stop (a removal that failed: `agentsandbox gc` retries it)
// joins Wait's. When Open fails, the result says only the backend's
// isolation and when the attempt started and ended.
func RunStep(ctx context.Context, b Backend, spec StepSpec) (StepResult, error) {
	started := time.Now()
	sb, err := b.Open(ctx, spec)
	if err != nil {
		return StepResult{Isolation: b.Isolation(), Started: started, Finished: time.Now()}, err
	}
	res, err := sb.Wait(ctx)
	if serr := sb.Stop(ctx); serr != nil {
		err = errors.Join(err, serr)
	}
	return res, err
}

// WaitSession is Wait of a session job's sandbox sb, for every backend:
// it waits until the sandbox ends (Stop, or its agent exiting) and returns
// res with the end time, the usage (while the cgroup is still there) and
// the agent's result.json, whose status follows Classify as a batch
// step's does. memoryLimit is the cgroup's memory limit, words name the
// backend's sandbox in the detail.
func WaitSession(ctx context.Context, sb Sandbox, spec StepSpec, memoryLimit int64, words Words, res StepResult) (StepResult, error) {
	select {
	case <-sb.Done():
	case <-ctx.Done():
		res.Finished = time.Now()
		return res, fmt.Errorf("wait for the session of step %q: %w", spec.Step.Name, ctx.Err())
	}
	res.Finished = time.Now()
	res.Usage, _ = sb.Usage() // gone once Stop has removed the cgroup
	result, hasResult, rerr := ReadResult(spec.ControlDir)
	res.Result, res.HasResult = result, hasResult
	res.Status, res.Detail = Classify(Facts{
		Result: result, HasResult: hasResult, ResultErr: rerr,
		Usage: res.Usage, MemoryLimit: memoryLimit,
		Words: words,
	})
	return res, nil
}
