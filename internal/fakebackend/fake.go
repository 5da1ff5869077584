// Package fake is a vmrunner.Backend without any isolation, for tests of
// the scheduler, the apply command and the sandbox manager that must not
// need root.
//
// It runs the job with the real guest agent in-process, on the host, as
// the calling user: it reads the job.json the engine wrote (and, like the
// real backends, never rewrites it), and runs a copy whose workdir is
// mapped from /workspace to the step's workspace directory and whose
// uid/gid are the caller's from a scratch directory. A batch job runs
// under agent.RunJob; Wait moves the logs and result.json into the step's
// control directory and reads the result back like the real backends do.
// A session job is served by agent.RunSession on a socket in the scratch
// directory; Exec maps each request's workdir and ids the same way, and
// Stop brings its result.json back. It passes the portable parts of the
// runnertest suites. Fail lets a test make chosen steps end in an
// infrastructure error.
package fakebackend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/fsx/atomicfile"
	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/guest/agent"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Backend is the fake. The zero value is ready to use.
type Backend struct {
	// Fail maps step names to the infrastructure error Open returns for
	// them (without running anything).
	Fail map[string]error

	mu   sync.Mutex
	runs []vmrunner.StepSpec
}

var _ vmrunner.Backend = (*Backend)(nil)

// New returns a fake backend.
func New() *Backend { return &Backend{} }

// Isolation reports namespace, the default backend's level, so results
// look like the real ones; the fake itself isolates nothing.
func (b *Backend) Isolation() workflow.Isolation { return workflow.IsolationNamespace }

// Runs returns the specs Open was called with, in call order.
func (b *Backend) Runs() []vmrunner.StepSpec {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]vmrunner.StepSpec(nil), b.runs...)
}

// agentFiles are what the agent writes, which the fake moves from its
// scratch directory to the step's control directory.
var agentFiles = []string{guest.ResultFile, guest.StdoutFile, guest.StderrFile}

// Sandbox is one open step of the fake: its agent runs in a goroutine.
type Sandbox struct {
	spec    vmrunner.StepSpec
	job     guest.Job // the host copy the agent runs
	scratch string    // the agent's control directory
	res     vmrunner.StepResult

	cancel context.CancelFunc // ends the agent
	done   chan struct{}      // closed when the agent returned
	err    error              // the agent's error, set before done closes

	stopOnce sync.Once
	stopErr  error
}

// Open starts the step's job on the host with the guest agent: a batch job
// runs at once; a session job's agent serves on a socket, and Open returns
// once it listens.
func (b *Backend) Open(ctx context.Context, spec vmrunner.StepSpec) (_ vmrunner.Sandbox, err error) {
	b.mu.Lock()
	b.runs = append(b.runs, spec)
	b.mu.Unlock()
	name := spec.Step.Name
	defer func() {
		if err != nil {
			err = fmt.Errorf("fake run step %q: %w", name, err)
		}
	}()
	if err := b.Fail[name]; err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &Sandbox{spec: spec, done: make(chan struct{})}
	s.res = vmrunner.StepResult{Isolation: b.Isolation(), Started: time.Now()}
	// job.json is the engine's, and its record hashes those bytes: like the
	// real backends, the fake leaves it alone. It runs a host copy of that
	// job (workdir mapped to the workspace, the caller's uid and gid) from
	// a scratch control directory, and moves the logs and result back.
	job, err := agent.ReadJob(spec.ControlDir)
	if err != nil {
		return nil, err
	}
	workdir, err := hostWorkdir(job.Workdir, spec.Workspace)
	if err != nil {
		return nil, err
	}
	job.Workdir = workdir
	job.UID, job.GID = os.Geteuid(), os.Getegid()
	s.job = job
	b2, err := json.Marshal(job)
	if err != nil {
		return nil, fmt.Errorf("encode job: %w", err)
	}
	for _, f := range append(agentFiles, guest.SessionSocket) {
		os.Remove(filepath.Join(spec.ControlDir, f))
	}
	// A session's socket path must fit sun_path: its scratch directory is
	// a short one of its own rather than one beneath the control directory.
	if job.Session {
		s.scratch, err = os.MkdirTemp("", "fakesb-")
	} else {
		s.scratch, err = os.MkdirTemp(spec.ControlDir, ".fake-")
	}
	if err != nil {
		return nil, err
	}
	if err := atomicfile.WriteFile(filepath.Join(s.scratch, guest.JobFile), b2, 0o600); err != nil {
		os.RemoveAll(s.scratch)
		return nil, err
	}
	actx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if !job.Session {
		go func() {
			_, s.err = agent.RunJob(actx, s.scratch, spec.Console)
			close(s.done)
		}()
		return s, nil
	}
	ready := make(chan struct{})
	go func() {
		_, s.err = agent.RunSession(actx, s.scratch, spec.Console, agent.SessionOptions{Ready: func() { close(ready) }})
		close(s.done)
	}()
	select {
	case <-ready:
		return s, nil
	case <-s.done:
		err = fmt.Errorf("the agent ended before it served the session: %v", s.err)
	case <-ctx.Done():
		err = ctx.Err()
	}
	return nil, errors.Join(err, s.Stop(context.Background()))
}

// Wait waits for the agent. For a batch job it then moves the logs and
// result.json to the control directory and reads the result back, with
// the real backends' bounds and rule (vmrunner.Classify); there is no
// cgroup, console or host deadline. When ctx is done first, the job is
// killed and the error wraps ctx's.
func (s *Sandbox) Wait(ctx context.Context) (vmrunner.StepResult, error) {
	res := s.res
	name := s.spec.Step.Name
	var cerr error
	select {
	case <-s.done:
	case <-ctx.Done():
		cerr = ctx.Err()
		s.cancel()
		<-s.done
	}
	res.Finished = time.Now()
	if !s.job.Session {
		if err := s.collect(); err != nil {
			return res, fmt.Errorf("fake run step %q: %w", name, err)
		}
	}
	if cerr != nil {
		return res, fmt.Errorf("fake run step %q: %w", name, cerr)
	}
	if s.err != nil {
		return res, fmt.Errorf("fake run step %q: %w", name, s.err)
	}
	r, ok, err := vmrunner.ReadResult(s.spec.ControlDir)
	res.Result, res.HasResult = r, ok
	if ok {
		res.Usage.CPUTime = time.Duration(r.Rusage.UserMS+r.Rusage.SystemMS) * time.Millisecond
		res.Usage.PeakMemoryBytes = r.Rusage.MaxRSSKiB * 1024
	}
	res.Status, res.Detail = vmrunner.Classify(vmrunner.Facts{
		Result: r, HasResult: ok, ResultErr: err, TimeoutMS: s.job.TimeoutMS,
	})
	return res, nil
}

// collect moves what the agent wrote to the step's control directory.
func (s *Sandbox) collect() error {
	for _, f := range agentFiles {
		src, dst := filepath.Join(s.scratch, f), filepath.Join(s.spec.ControlDir, f)
		err := os.Rename(src, dst)
		if err != nil && !errors.Is(err, fs.ErrNotExist) && s.job.Session {
			// A session's scratch directory is on another file system
			// when the control directory is not in the temporary one.
			var b []byte
			if b, err = os.ReadFile(src); err == nil {
				err = atomicfile.WriteFile(dst, b, 0o600)
			}
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// Exec runs one command of a session job through the agent's socket: the
// request's workdir is mapped to the host workspace as the job's is, and
// its uid and gid are the caller's.
func (s *Sandbox) Exec(ctx context.Context, q guest.SessionRequest) (vmrunner.Exec, error) {
	name := s.spec.Step.Name
	if !s.job.Session {
		return nil, fmt.Errorf("exec in step %q: %w", name, vmrunner.ErrBatchExec)
	}
	select {
	case <-s.done:
		return nil, fmt.Errorf("exec in session %q: the session is stopped: open a new one", name)
	default:
	}
	wd := q.Workdir
	if !filepath.IsAbs(wd) {
		wd = filepath.Join(guest.WorkspaceMount, wd)
	}
	wd, err := hostWorkdir(wd, s.spec.Workspace)
	if err != nil {
		return nil, fmt.Errorf("exec in session %q: %w", name, err)
	}
	q.Workdir, q.UID, q.GID = wd, os.Geteuid(), os.Getegid()
	c, err := net.Dial("unix", filepath.Join(s.scratch, guest.SessionSocket))
	if err != nil {
		return nil, fmt.Errorf("exec in session %q: connect to the agent: %w", name, err)
	}
	x, err := vmrunner.StartExec(ctx, c, q)
	if err != nil {
		return nil, fmt.Errorf("exec in session %q: %w", name, err)
	}
	return x, nil
}

// Usage is zero: the fake has no cgroup to measure.
func (s *Sandbox) Usage() (vmrunner.Usage, error) { return vmrunner.Usage{}, nil }

// Done is closed when the agent has returned.
func (s *Sandbox) Done() <-chan struct{} { return s.done }

// Stop ends the agent (a batch job is killed, a session stops serving
// and writes its result), brings its files to the control directory and
// removes the scratch directory.
func (s *Sandbox) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.cancel()
		<-s.done
		err := s.collect()
		if rerr := os.RemoveAll(s.scratch); rerr != nil {
			err = errors.Join(err, rerr)
		}
		if err != nil {
			s.stopErr = fmt.Errorf("fake stop step %q: %w", s.spec.Step.Name, err)
		}
	})
	return s.stopErr
}

// hostWorkdir maps a workdir below /workspace to the host workspace.
func hostWorkdir(workdir, workspace string) (string, error) {
	rel, ok := strings.CutPrefix(filepath.Clean(workdir), guest.WorkspaceMount)
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
		return "", fmt.Errorf("workdir %q is outside %s, which the fake backend cannot map to the host", workdir, guest.WorkspaceMount)
	}
	return filepath.Join(workspace, rel), nil
}
