// Package fake is a vmrunner.Backend without any isolation, for tests of
// the scheduler and the apply command that must not need root.
//
// It runs the job with the real guest agent (agent.RunJob) in-process, on
// the host, as the calling user: it reads the job.json the engine wrote
// (and, like the real backends, never rewrites it), runs a copy whose
// workdir is mapped from /workspace to the step's workspace directory and
// whose uid/gid are the caller's from a scratch directory, moves the logs
// and result.json into the step's control directory, and reads the result
// back like the real backends do. It passes the portable
// part of the runnertest suite. Fail lets a test make chosen steps end in an
// infrastructure error.
package fakebackend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentsandbox/agentsandbox/fsx/atomicfile"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/guest/agent"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Backend is the fake. The zero value is ready to use.
type Backend struct {
	// Fail maps step names to the infrastructure error Run returns for them
	// (without running anything).
	Fail map[string]error

	mu   sync.Mutex
	runs []vmrunner.StepSpec
}

// New returns a fake backend.
func New() *Backend { return &Backend{} }

// Isolation reports namespace, the default backend's level, so results
// look like the real ones; the fake itself isolates nothing.
func (b *Backend) Isolation() workflow.Isolation { return workflow.IsolationNamespace }

// Runs returns the specs Run was called with, in call order.
func (b *Backend) Runs() []vmrunner.StepSpec {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]vmrunner.StepSpec(nil), b.runs...)
}

// Run runs the step's job on the host with the guest agent.
func (b *Backend) Run(ctx context.Context, spec vmrunner.StepSpec) (vmrunner.StepResult, error) {
	b.mu.Lock()
	b.runs = append(b.runs, spec)
	b.mu.Unlock()
	res := vmrunner.StepResult{Isolation: b.Isolation(), Started: time.Now()}
	name := spec.Step.Name
	if err := b.Fail[name]; err != nil {
		res.Finished = time.Now()
		return res, fmt.Errorf("fake run step %q: %w", name, err)
	}
	// job.json is the engine's, and its record hashes those bytes: like the
	// real backends, the fake leaves it alone. It runs a host copy of that
	// job (workdir mapped to the workspace, the caller's uid and gid) from
	// a scratch control directory, and moves the logs and result back.
	job, err := agent.ReadJob(spec.ControlDir)
	if err != nil {
		return res, fmt.Errorf("fake run step %q: %w", name, err)
	}
	workdir, err := hostWorkdir(job.Workdir, spec.Workspace)
	if err != nil {
		return res, fmt.Errorf("fake run step %q: %w", name, err)
	}
	job.Workdir = workdir
	job.UID, job.GID = os.Geteuid(), os.Getegid()
	b2, err := json.Marshal(job)
	if err != nil {
		return res, fmt.Errorf("fake run step %q: encode job: %w", name, err)
	}
	for _, f := range []string{guest.ResultFile, guest.StdoutFile, guest.StderrFile} {
		os.Remove(filepath.Join(spec.ControlDir, f))
	}
	scratch, err := os.MkdirTemp(spec.ControlDir, ".fake-")
	if err != nil {
		return res, fmt.Errorf("fake run step %q: %w", name, err)
	}
	defer os.RemoveAll(scratch)
	if err := atomicfile.WriteFile(filepath.Join(scratch, guest.JobFile), b2, 0o600); err != nil {
		return res, fmt.Errorf("fake run step %q: %w", name, err)
	}
	r, err := agent.RunJob(ctx, scratch, spec.Console)
	res.Finished = time.Now()
	for _, f := range []string{guest.ResultFile, guest.StdoutFile, guest.StderrFile} {
		if rerr := os.Rename(filepath.Join(scratch, f), filepath.Join(spec.ControlDir, f)); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return res, fmt.Errorf("fake run step %q: %w", name, rerr)
		}
	}
	if cerr := ctx.Err(); cerr != nil {
		return res, fmt.Errorf("fake run step %q: %w", name, cerr)
	}
	if err != nil {
		return res, fmt.Errorf("fake run step %q: %w", name, err)
	}
	// The host reads the job's status from result.json, as the real
	// backends do, with the same bounds.
	r, ok, err := vmrunner.ReadResult(spec.ControlDir)
	res.Result, res.HasResult = r, ok
	if ok {
		res.Usage.CPUTime = time.Duration(r.Rusage.UserMS+r.Rusage.SystemMS) * time.Millisecond
		res.Usage.PeakMemoryBytes = r.Rusage.MaxRSSKiB * 1024
	}
	// There is no cgroup, console or host deadline: the result, or its
	// absence, decides by the real backends' rule.
	res.Status, res.Detail = vmrunner.Classify(vmrunner.Facts{
		Result: r, HasResult: ok, ResultErr: err, TimeoutMS: job.TimeoutMS,
	})
	return res, nil
}

// hostWorkdir maps a workdir below /workspace to the host workspace.
func hostWorkdir(workdir, workspace string) (string, error) {
	rel, ok := strings.CutPrefix(filepath.Clean(workdir), guest.WorkspaceMount)
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
		return "", fmt.Errorf("workdir %q is outside %s, which the fake backend cannot map to the host", workdir, guest.WorkspaceMount)
	}
	return filepath.Join(workspace, rel), nil
}
