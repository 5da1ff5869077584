// Package pipeline runs one apply end to end: it resolves each step's
// isolation, realises what needs Nix, fetches the inputs, runs the steps in
// DAG order on their backends, stores logs and outputs in the blob store, and
// writes the execution record. The CLI's apply command is a thin layer over
// Run; tests drive Run with the fake backend.
package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/agentsandbox/agentsandbox/internal/atomicfile"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Options configure one run.
type Options struct {
	WorkflowPath  string // for resolving file inputs and naming the lock file
	WorkflowBytes []byte // the file's exact bytes, pinned in the record
	// Isolation overrides every step's isolation; empty keeps the workflow's.
	Isolation workflow.Isolation
	Jobs      int
	Host      Host
	Store     *record.Store
	// RunRoot holds the run's temporary directories (workspaces, control
	// directories, generated flake); they are removed when the run ends.
	RunRoot string
	// Backends by isolation level; a level without one cannot run here.
	Backends map[workflow.Isolation]vmrunner.Backend
	// Realise builds the closures of the steps that need Nix. Nil: no Nix.
	Realise RealiseFunc
	// Fetch places a workflow input into dir and reports its digest.
	Fetch       FetchFunc
	Decision    *policy.Decision
	ToolVersion string
	Parent      *record.ID
	Events      func(Event)
}

// Realised is what Nix produced for one step.
type Realised struct {
	Runner  string             // vm: the microvm.nix runner's store path
	EnvPath string             // namespace: the step's buildEnv store path
	Closure []record.StorePath // every store path the step runs on
}

// RealiseFunc builds the given steps (with their resolved isolation).
type RealiseFunc func(ctx context.Context, steps []workflow.Step) (map[string]Realised, error)

// FetchFunc fetches input into a fresh directory dir (the input itself is
// placed at dir/content) and returns the record of what was fetched.
type FetchFunc func(ctx context.Context, in workflow.Input, dir string) (record.Input, string, error)

// Result is a finished run.
type Result struct {
	ID       record.ID
	Record   *record.Record
	Outcomes []vmrunner.Outcome
}

// Succeeded reports whether every step ran and succeeded.
func (r *Result) Succeeded() bool { return r.Record.Status == record.StatusSucceeded }

// Run applies w. It returns a Result whenever a record was written (also for
// failed steps); the error is for what stopped the run: a build failure
// (*BuildError), an input that failed its checksum, or a sandbox failure.
func Run(ctx context.Context, w *workflow.Workflow, o Options) (*Result, error) {
	emit := o.Events
	if emit == nil {
		emit = func(Event) {}
	}
	started := time.Now().UTC()
	steps, err := resolve(w, o)
	if err != nil {
		return nil, err
	}
	runID, err := newRunID()
	if err != nil {
		return nil, err
	}
	runDir := filepath.Join(o.RunRoot, runID)
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return nil, fmt.Errorf("create run directory: %w", err)
	}
	defer os.RemoveAll(runDir)
	if err := writeOwner(runDir, runID); err != nil {
		return nil, fmt.Errorf("create run directory: %w", err)
	}

	r := &run{o: o, w: w, emit: emit, runID: runID, runDir: runDir, steps: steps,
		workspaces: map[string]string{}, realised: map[string]Realised{}, inputDirs: map[string]string{}}
	rec := &record.Record{
		Version:     record.Version,
		ToolVersion: o.ToolVersion,
		Host:        o.Host.Record(),
		Started:     started,
		Parent:      o.Parent,
	}
	if err := r.pinWorkflow(rec); err != nil {
		return nil, err
	}
	if o.Decision != nil {
		rec.Policy = policyRecord(o.Decision)
	}

	runErr := r.prepare(ctx, rec)
	var outcomes []vmrunner.Outcome
	if runErr == nil {
		emit(Event{Time: time.Now(), Kind: EventPhase, Line: fmt.Sprintf("run %d steps (%s)", len(steps), runID)})
		wf := *w
		wf.Steps = steps
		outcomes, runErr = vmrunner.Schedule(ctx, &wf, o.Jobs, r.runStep)
		for _, oc := range outcomes {
			if !oc.Ran {
				emit(Event{Time: time.Now(), Kind: EventSkipped, Step: oc.Step, Line: oc.Skipped})
			}
		}
	}
	// A cancelled run still gets a record of what it did.
	rec.Steps = r.stepRecords(outcomes)
	rec.Finished = time.Now().UTC()
	rec.Status = runStatus(rec.Steps, runErr)
	if runErr != nil {
		rec.Error = runErr.Error()
	}
	id, err := o.Store.Put(rec)
	if err != nil {
		return nil, errors.Join(runErr, fmt.Errorf("write record: %w", err))
	}
	return &Result{ID: id, Record: rec, Outcomes: outcomes}, runErr
}

func newRunID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("make run id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// run is the state of one Run.
type run struct {
	o      Options
	w      *workflow.Workflow
	emit   func(Event)
	runID  string
	runDir string
	steps  []workflow.Step // isolation resolved

	mu         sync.Mutex
	workspaces map[string]string // finished step → its workspace
	realised   map[string]Realised
	inputDirs  map[string]string // input name → host path of its content
	inputs     map[string]record.Input
	records    map[string]*record.Step
}

// pinWorkflow stores the workflow file's bytes and fills rec.Workflow.
func (r *run) pinWorkflow(rec *record.Record) error {
	d, _, err := r.o.Store.PutBlob(bytesReader(r.o.WorkflowBytes))
	if err != nil {
		return fmt.Errorf("store workflow file: %w", err)
	}
	rec.Workflow = record.Workflow{Name: r.w.Name, FileDigest: d, CanonicalHash: record.Digest(r.w.Hash())}
	return nil
}

// prepare realises closures and fetches inputs.
func (r *run) prepare(ctx context.Context, rec *record.Record) error {
	var needNix []workflow.Step
	for _, s := range r.steps {
		if s.Isolation == workflow.IsolationVM || len(s.Packages) > 0 {
			needNix = append(needNix, s)
		}
	}
	if len(needNix) > 0 {
		if r.o.Realise == nil {
			return fmt.Errorf("step %q needs Nix (packages or vm isolation) and Nix is not available: %w", needNix[0].Name, ErrNoNix)
		}
		r.emit(Event{Time: time.Now(), Kind: EventPhase, Line: fmt.Sprintf("realise %d steps with Nix", len(needNix))})
		if rec.Host.Nix == "" {
			rec.Host.Nix = nixVersion(ctx)
		}
		got, err := r.o.Realise(ctx, needNix)
		if err != nil {
			return err
		}
		r.realised = got
	}
	if len(r.w.Inputs) > 0 {
		r.emit(Event{Time: time.Now(), Kind: EventPhase, Line: fmt.Sprintf("fetch %d inputs", len(r.w.Inputs))})
	}
	r.inputs = map[string]record.Input{}
	for _, in := range r.w.Inputs {
		dir := filepath.Join(r.runDir, "inputs", in.Name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("fetch input %q: %w", in.Name, err)
		}
		ri, path, err := r.o.Fetch(ctx, in, dir)
		if err != nil {
			return err // the fetcher names the input
		}
		rec.Inputs = append(rec.Inputs, ri)
		r.inputs[in.Name] = ri
		r.inputDirs[in.Name] = path
	}
	return nil
}

// ErrNoNix marks a run that needs Nix on a host without it.
var ErrNoNix = errors.New("install Nix (Debian: apt-get install nix-bin) or remove the step's packages and use namespace isolation")

// BuildError is a failed Nix evaluation or build (exit status 4).
type BuildError struct{ Err error }

func (e *BuildError) Error() string { return e.Err.Error() }
func (e *BuildError) Unwrap() error { return e.Err }

// runStep runs one step: workspace, job, backend, logs, outputs.
func (r *run) runStep(ctx context.Context, step workflow.Step) (vmrunner.StepResult, error) {
	dirs, err := newStepDirs(r.runDir, step.Name)
	if err != nil {
		return vmrunner.StepResult{}, err
	}
	r.mu.Lock()
	needWS := map[string]string{}
	for _, n := range step.Needs {
		needWS[n] = r.workspaces[n]
	}
	r.mu.Unlock()
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
	ps, err := placements(step, r.inputDirs, inputs, needWS, byName, digests)
	if err != nil {
		return vmrunner.StepResult{}, err
	}
	real := r.realised[step.Name]
	job := jobFor(step, real.EnvPath)
	if err := assemble(dirs.Workspace, ps, job.UID, job.GID); err != nil {
		return vmrunner.StepResult{}, err
	}
	sr := &record.Step{Name: step.Name, Isolation: string(step.Isolation), Closure: real.Closure, Inputs: map[string]record.Digest{}}
	// What the step receives was verified on its way in (fetched inputs
	// against their pins, outputs of needed steps as the NARs stored when
	// those steps ended); the record names each by that digest.
	for _, p := range ps {
		sr.Inputs[p.To] = p.Digest
	}
	if len(real.Closure) == 0 {
		fp, err := hostRootFingerprint()
		if err != nil {
			return vmrunner.StepResult{}, err
		}
		sr.HostRoot = &fp
	}
	jobBytes, err := encodeJob(job)
	if err != nil {
		return vmrunner.StepResult{}, err
	}
	if err := atomicfile.WriteFile(filepath.Join(dirs.Control, guest.JobFile), jobBytes, 0o600); err != nil {
		return vmrunner.StepResult{}, fmt.Errorf("write job: %w", err)
	}
	if sr.JobDigest, _, err = r.o.Store.PutBlob(bytesReader(jobBytes)); err != nil {
		return vmrunner.StepResult{}, fmt.Errorf("store job: %w", err)
	}

	backend := r.o.Backends[step.Isolation]
	if backend == nil {
		return vmrunner.StepResult{}, fmt.Errorf("no %s backend on this host", step.Isolation)
	}
	console := newLineWriter(func(line string) {
		r.emit(Event{Time: time.Now(), Kind: EventLog, Step: step.Name, Line: line})
	})
	r.emit(Event{Time: time.Now(), Kind: EventStarted, Step: step.Name})
	res, err := backend.Run(ctx, vmrunner.StepSpec{
		RunID: r.runID, Step: step, Job: job,
		Workspace: dirs.Workspace, ControlDir: dirs.Control,
		ClosurePaths: storePaths(real.Closure), EnvPath: real.EnvPath, Runner: real.Runner,
		Console: console,
	})
	console.Flush()
	if err != nil {
		return res, err
	}
	if err := r.collect(step, dirs, &res, sr); err != nil {
		return res, err
	}
	r.mu.Lock()
	r.workspaces[step.Name] = dirs.Workspace
	if r.records == nil {
		r.records = map[string]*record.Step{}
	}
	r.records[step.Name] = sr
	r.mu.Unlock()
	r.emit(Event{Time: time.Now(), Kind: EventFinished, Step: step.Name, Result: &res})
	return res, nil
}

// collect stores a finished step's logs and outputs and completes its record.
// A declared output the step did not create fails the step.
func (r *run) collect(step workflow.Step, dirs stepDirs, res *vmrunner.StepResult, sr *record.Step) error {
	var err error
	if sr.Logs.Stdout, err = r.putFile(filepath.Join(dirs.Control, guest.StdoutFile)); err != nil {
		return err
	}
	if sr.Logs.Stderr, err = r.putFile(filepath.Join(dirs.Control, guest.StderrFile)); err != nil {
		return err
	}
	if _, statErr := os.Stat(filepath.Join(dirs.Control, ConsoleFile)); statErr == nil {
		d, err := r.putFile(filepath.Join(dirs.Control, ConsoleFile))
		if err != nil {
			return err
		}
		sr.Logs.Console = &d
	}
	if res.Status == vmrunner.StatusSucceeded {
		for _, out := range step.Outputs {
			p := filepath.Join(dirs.Workspace, filepath.FromSlash(out))
			if _, err := os.Lstat(p); err != nil {
				res.Status = vmrunner.StatusFailed
				res.Detail = fmt.Sprintf("declared output %q was not created", out)
				break
			}
			h, size, err := r.o.Store.PutNAR(p)
			if err != nil {
				return fmt.Errorf("store output %q of step %q: %w", out, step.Name, err)
			}
			sr.Outputs = append(sr.Outputs, record.Output{Path: out, NarHash: h, NarSize: size})
		}
	}
	fillStep(sr, res)
	return nil
}

// ConsoleFile is where the vm backend leaves the guest console in the control directory.
const ConsoleFile = "console.log"

func (r *run) putFile(path string) (record.Digest, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		d, _, err := r.o.Store.PutBlob(bytesReader(nil))
		return d, err
	}
	if err != nil {
		return record.Digest{}, fmt.Errorf("store log: %w", err)
	}
	defer f.Close()
	d, _, err := r.o.Store.PutBlob(f)
	if err != nil {
		return d, fmt.Errorf("store log %s: %w", filepath.Base(path), err)
	}
	return d, nil
}

// lineWriter calls fn with each complete line written to it.
type lineWriter struct {
	mu  sync.Mutex
	buf []byte
	fn  func(string)
}

func newLineWriter(fn func(string)) *lineWriter { return &lineWriter{fn: fn} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := indexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.fn(string(trimCR(w.buf[:i])))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 { // a very long line without a newline
		w.fn(string(w.buf))
		w.buf = nil
	}
	return len(p), nil
}

func (w *lineWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.fn(string(trimCR(w.buf)))
		w.buf = nil
	}
}

var _ io.Writer = (*lineWriter)(nil)
