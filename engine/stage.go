package engine

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"

	"github.com/agentsandbox/agentsandbox/fsx/atomicfile"
	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/netns/egress/gateway"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// staged is a step made ready for its backend's Open: its directories,
// its job.json written and stored, its record begun, its spec and egress.
type staged struct {
	dirs stepDirs
	job  guest.Job
	sr   *record.Step
	spec vmrunner.StepSpec // Console unset: the caller's
	gw   *gateway.Gateway  // nil without network.allow
}

// stage prepares one step for its sandbox, for a batch step (runStep) and
// a long-lived one (OpenSandbox) alike: the step's directories and the
// workspace's own filesystem, the inputs and the outputs of the steps it
// needs placed in the workspace, job.json written to the control
// directory and stored as a blob (the record's jobDigest), the step's
// record with its closure, environment, inputs and host root, and the
// spec with the step's egress. session makes the job a session job (no
// command and no timeout of its own: the agent serves commands until the
// sandbox is stopped); a batch job carries the step's trace context.
//
// job.json is written whole (renamed into place) but not synced: the step
// reads it through this host's kernel, and its durable copy is the job
// blob, which the store keeps. A crash ends the step anyway.
func (r *run) stage(ctx context.Context, step workflow.Step, session bool) (*staged, error) {
	dirs, err := newStepDirs(r.runDir, step.Name)
	if err != nil {
		return nil, err
	}
	if err := r.workspaces.Mount(ctx, step, dirs.Workspace); err != nil {
		return nil, err
	}
	byName := map[string]workflow.Step{}
	for _, s := range r.steps {
		byName[s.Name] = s
	}
	inputs := map[string]workflow.Input{}
	for _, in := range r.w.Inputs {
		inputs[in.Name] = in
	}
	r.mu.Lock()
	digests := map[string]record.Digest{}
	for name, ri := range r.inputs {
		digests["input:"+name] = ri.Digest
	}
	for _, n := range step.Needs {
		if nr := r.records[n]; nr != nil {
			for _, o := range nr.Outputs {
				digests["output:"+n+":"+o.Path] = o.NarHash.Blob()
			}
		}
	}
	r.mu.Unlock()
	ps, err := placements(step, r.inputDirs, inputs, byName, digests)
	if err != nil {
		return nil, err
	}
	real := r.realised[step.Name]
	job := jobFor(step, real.EnvPath)
	if session {
		job.Session, job.Command, job.TimeoutMS = true, nil, 0
	} else {
		addTraceEnv(ctx, &job) // the step span's TRACEPARENT, when tracing is on
	}
	if err := assemble(r.o.Store, dirs.Workspace, ps, job.UID, job.GID); err != nil {
		return nil, err
	}
	sr := &record.Step{Name: step.Name, Isolation: string(step.Isolation), Closure: real.Closure, Environment: real.Environment, Inputs: map[string]record.Digest{}}
	// What the step receives was verified on its way in (fetched inputs
	// against their pins, outputs of needed steps as the NARs stored when
	// those steps ended); the record names each by that digest.
	for _, p := range ps {
		sr.Inputs[p.To] = p.Digest
	}
	if len(real.Closure) == 0 {
		fp, err := hostRootFingerprint()
		if err != nil {
			return nil, err
		}
		sr.HostRoot = &fp
	}
	jobBytes, err := encodeJob(job)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(filepath.Join(dirs.Control, guest.JobFile), jobBytes, 0o600, atomicfile.Options{NoSync: true}); err != nil {
		return nil, fmt.Errorf("write job: %w", err)
	}
	if sr.JobDigest, _, err = r.o.Store.PutBlob(bytes.NewReader(jobBytes)); err != nil {
		return nil, fmt.Errorf("store job: %w", err)
	}
	st := &staged{dirs: dirs, job: job, sr: sr}
	st.spec = vmrunner.StepSpec{
		RunID: r.runID, Step: step, Job: job,
		Workspace: dirs.Workspace, ControlDir: dirs.Control,
		ClosurePaths: storePaths(real.Closure), EnvPath: real.EnvPath, Runner: real.Runner, RunnerNote: real.RunnerNote,
		SeccompAllow: r.decision.SeccompAllowFor(step.Name),
	}
	if st.gw, err = r.stepEgress(step); err != nil {
		return nil, err
	}
	if st.gw != nil {
		st.spec.Egress = st.gw
	}
	return st, nil
}
