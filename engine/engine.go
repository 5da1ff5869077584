// Package engine runs one workflow end to end. It is the entry point the
// CLI's apply command and the coming server share; each is a thin caller.
//
//	res, err := engine.Run(ctx, w, engine.Options{Policy: p, Backends: ..., Events: fn, ...})
//
// Run goes through these phases in order, and nothing runs unadmitted:
//
//  1. resolve: Resolve decides every step's isolation (Options.Isolation,
//     the step's own, the auto rule) from the host's facts;
//  2. admit: Options.Policy (required; policy.Load gives one) is evaluated
//     on that resolved plan and Host.Policy(). The decision is an
//     EventAdmitted event; a denial is a *policy.DeniedError, and nothing
//     is created or recorded;
//  3. refuse what this host cannot run (network egress, packages without
//     Nix, a level without a backend);
//  4. realise what needs Nix, fetch and check the inputs;
//  5. schedule the steps in DAG order (schedule.go) on their backends:
//     for each, stage (stage.go, which OpenSandbox shares) assembles the
//     workspace and writes job.json, the one copy the agent reads and the
//     record's jobDigest hashes, and vmrunner.RunStep opens, waits for and
//     stops the step's sandbox;
//  6. store logs and outputs in the blob store, and write the execution
//     record, which embeds the decision.
//
// Progress comes through the Options.Events callback (phases, warnings,
// the decision, each step's start, console lines and end); the outcome is
// the returned *Result, whenever a record was written.
//
// The engine orchestrates and owns no host resource: what a step holds on
// the host (state files, netns, egress room, cgroup, jail or VM, workspace
// filesystem and quota, directories) belongs to vmrunner/sandbox, which
// releases it in one teardown order; the engine says when a workspace is
// mounted (stage) and released (once the step's outputs are stored).
//
// Cancelling ctx
// stops the run: the steps are stopped, everything the run created is
// removed, and a record of what it did is still written. Tests drive Run
// with internal/fakebackend.
package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/fsx/jobfs"
	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/nixbuild"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/vmrunner/sandbox"
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
	// HostStateDir holds the state files that list each workspace quota's
	// mount and loop device for gc (hoststate.DefaultDir when empty).
	HostStateDir string
	// Backends by isolation level; a level without one cannot run here.
	Backends map[workflow.Isolation]vmrunner.Backend
	// Realise builds the closures of the steps that need Nix. Nil: no Nix.
	Realise RealiseFunc
	// Fetch places a workflow input into dir and reports its digest.
	Fetch FetchFunc
	// Policy admits the run: Run evaluates it on the workflow with every
	// step's isolation resolved (Resolve) and the host's facts
	// (Host.Policy), before anything is built or run. Required: without
	// it Run fails with ErrNoPolicy.
	Policy      Policy
	ToolVersion string
	Parent      *record.ID
	Events      func(Event)
	// LogLimit is the most the host keeps of each of a step's streams;
	// 0 means DefaultLogLimit.
	LogLimit int64
	// Upstream is how steps' egress proxies reach the internet; the zero
	// value is the host's own resolver and dialer.
	Upstream Upstream
	// Owner is the identity whose run or sandbox this is
	// (record.Record.Owner: the server's caller), empty for an apply.
	Owner string
}

// Realised is what Nix produced for one step.
type Realised struct {
	Runner string // vm: the microvm.nix runner's store path
	// RunnerNote says why the realiser chose this runner, when it chose
	// (vmrunner.StepSpec.RunnerNote).
	RunnerNote string
	EnvPath    string             // namespace: the step's buildEnv store path
	Closure    []record.StorePath // every store path the step runs on
	// Lock is the flake.lock the closure was built with; every step of
	// one realisation has the same.
	Lock []byte
	// Environment is the hash of the step's environment (nixgen), which
	// steps of the same environment share. With a flake of the user's own,
	// it names the attribute built from that flake.
	Environment *record.Digest
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
	Outcomes []Outcome
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
	plan, decision, err := tracedAdmitted(ctx, w, o, emit)
	if err != nil {
		return nil, err
	}
	steps := plan.Steps
	runID, err := newRunID()
	if err != nil {
		return nil, err
	}
	nameRun(ctx, runID)
	runDir := filepath.Join(o.RunRoot, runID)
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return nil, fmt.Errorf("create run directory: %w", err)
	}
	workspaces := sandbox.NewWorkspaces(o.HostStateDir, runID, runDir)
	defer workspaces.RemoveRunDir()
	if err := hoststate.WriteOwner(runDir, runID); err != nil {
		return nil, fmt.Errorf("create run directory: %w", err)
	}

	r := &run{o: o, w: w, emit: emit, runID: runID, runDir: runDir, steps: steps, decision: decision, workspaces: workspaces,
		realised: map[string]Realised{}, inputDirs: map[string]string{}}
	rec := &record.Record{
		Version:     record.Version,
		ToolVersion: o.ToolVersion,
		Host:        o.Host.Record(),
		Started:     started,
		Parent:      o.Parent,
		Policy:      policyRecord(decision),
		TraceID:     traceID(ctx),
		Owner:       o.Owner,
	}
	if err := r.pinWorkflow(rec); err != nil {
		return nil, err
	}
	if err := r.logDecisions(rec, plan); err != nil { // decisionlog.go
		return nil, err
	}

	runErr := r.prepare(ctx, rec)
	var outcomes []Outcome
	if runErr == nil {
		emit(Event{Time: time.Now(), Kind: EventPhase, Line: fmt.Sprintf("run %d steps (%s)", len(steps), runID)})
		wf := *w
		wf.Steps = steps
		outcomes, runErr = schedule(ctx, &wf, o.Jobs, r.tracedStep)
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
	id, err := putRecord(ctx, o.Store, rec)
	if err != nil {
		return nil, errors.Join(runErr, fmt.Errorf("write record: %w", err))
	}
	return &Result{ID: id, Record: rec, Outcomes: outcomes}, runErr
}

// admitted is what every run and sandbox starts with: w with each step's
// isolation resolved, admitted by the policy, and refused here when this
// host cannot run it.
func admitted(ctx context.Context, w *workflow.Workflow, o Options, emit func(Event)) (*workflow.Workflow, *policy.Decision, error) {
	plan, err := Resolve(w, o.Isolation, o.Host.Policy())
	if err != nil {
		return nil, nil, err
	}
	decision, err := admit(ctx, o, plan, emit)
	if err != nil {
		return nil, nil, err
	}
	if err := checkSeccompAllow(decision); err != nil {
		return nil, nil, err
	}
	if err := refuse(plan.Steps, o); err != nil {
		return nil, nil, err
	}
	return plan, decision, nil
}

// newRunID is a run's id: 128 random bits as 32 hex digits, unique across
// the machines whose records meet in one store, and DNS-safe.
func newRunID() (string, error) {
	var b [16]byte
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
	// decision is the policy's admission of the resolved plan.
	decision *policy.Decision

	mu        sync.Mutex
	realised  map[string]Realised
	inputDirs map[string]string // input name → host path of its content
	inputs    map[string]record.Input
	records   map[string]*record.Step
	// workspaces are the steps' workspace filesystems, which the sandbox
	// package owns; the engine says when each is mounted and released.
	workspaces *sandbox.Workspaces
}

// pinWorkflow stores the workflow file's bytes and fills rec.Workflow.
func (r *run) pinWorkflow(rec *record.Record) error {
	d, _, err := r.o.Store.PutBlob(bytes.NewReader(r.o.WorkflowBytes))
	if err != nil {
		return fmt.Errorf("store workflow file: %w", err)
	}
	rec.Workflow = record.Workflow{Name: r.w.Name, FileDigest: d, CanonicalHash: record.Digest(r.w.Hash())}
	return nil
}

// pinLock stores the flake.lock the closures were built with and names it
// in the record.
func (r *run) pinLock(rec *record.Record) error {
	for _, name := range slices.Sorted(maps.Keys(r.realised)) {
		lock := r.realised[name].Lock
		if len(lock) == 0 {
			continue
		}
		d, _, err := r.o.Store.PutBlob(bytes.NewReader(lock))
		if err != nil {
			return fmt.Errorf("store the flake lock: %w", err)
		}
		rec.Workflow.Lock = &d
		return nil
	}
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
			rec.Host.Nix, _ = nixVersion(ctx)
		}
		got, err := tracedRealise(ctx, r.o.Realise, needNix)
		if err != nil {
			return err
		}
		r.realised = got
		if err := r.pinLock(rec); err != nil {
			return err
		}
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
		ri, path, err := tracedFetch(ctx, r.o.Fetch, in, dir)
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
var ErrNoNix = errors.New("install Nix " + nixbuild.MinNixVersionHint + " (" + nixbuild.HowToGetNix + "), " +
	"or remove the step's packages and use namespace isolation")

// BuildError is a failed Nix evaluation or build (exit status 4).
type BuildError struct{ Err error }

func (e *BuildError) Error() string { return e.Err.Error() }
func (e *BuildError) Unwrap() error { return e.Err }

// runStep runs one step: staging (stage), backend, logs, outputs.
func (r *run) runStep(ctx context.Context, step workflow.Step) (vmrunner.StepResult, error) {
	st, err := r.stage(ctx, step, false)
	if err != nil {
		return vmrunner.StepResult{}, err
	}
	dirs, sr, spec, gw := st.dirs, st.sr, st.spec, st.gw
	backend := r.o.Backends[step.Isolation]
	if backend == nil {
		return vmrunner.StepResult{}, fmt.Errorf("no %s backend on this host", step.Isolation)
	}
	console := newLineWriter(r.logLimit(), func(line string) {
		r.emit(Event{Time: time.Now(), Kind: EventLog, Step: step.Name, Line: line})
	})
	spec.Console = console
	r.emit(Event{Time: time.Now(), Kind: EventStarted, Step: step.Name})
	res, err := vmrunner.RunStep(ctx, backend, spec)
	console.Flush()
	if err != nil {
		return res, err
	}
	if err := r.recordEgress(step, gw, r.decision.EgressDeny, sr); err != nil {
		return res, err
	}
	if res.Seccomp != "" {
		d, err := record.ParseDigest(res.Seccomp)
		if err != nil {
			return res, fmt.Errorf("seccomp filter digest: %w", err)
		}
		sr.Seccomp = &d
	}
	if err := r.collect(step, dirs, &res, sr); err != nil {
		return res, err
	}
	// Its outputs are in the store now: the workspace's filesystem can go.
	// A failure here is the host's, and the run's end tries again.
	if err := r.workspaces.Release(step.Name); err != nil {
		r.emit(Event{Time: time.Now(), Kind: EventWarning, Step: step.Name, Line: err.Error()})
	}
	r.mu.Lock()
	if r.records == nil {
		r.records = map[string]*record.Step{}
	}
	r.records[step.Name] = sr
	r.mu.Unlock()
	r.emit(Event{Time: time.Now(), Kind: EventFinished, Step: step.Name, Result: &res})
	return res, nil
}

// Defaults for what the host keeps of a step. Everything it keeps was
// written by the job, so each is bounded (docs/isolation.md, "What the host
// reads of a job").
const (
	// DefaultLogLimit is the most the host keeps of each of a step's
	// streams (stdout, stderr, the VM console), unless Options.LogLimit
	// says otherwise. A longer stream is kept as its first and last half of
	// the limit with a marker line between, and the record counts the bytes
	// left out (record.Logs). The live console stops at the same limit.
	DefaultLogLimit = 16 << 20
	// DefaultOutputEntries bounds the files, directories and symlinks in
	// all the outputs of one step. Their bytes are bounded by the step's
	// resources.disk.
	DefaultOutputEntries = 1_000_000
)

func (r *run) logLimit() int64 {
	if r.o.LogLimit > 0 {
		return r.o.LogLimit
	}
	return DefaultLogLimit
}

// outputLimit is the most bytes all of step's outputs may hold together
// (regular files' apparent sizes): its resources.disk.
func outputLimit(step workflow.Step) int64 {
	if step.Resources.Disk > 0 {
		return step.Resources.Disk
	}
	return workflow.DefaultDisk
}

// jobFault is something the job did to what the host reads of it (a log
// that is a symlink, an output through one, over its limit): the step
// fails with it as its detail, the run goes on.
type jobFault struct{ msg string }

func (e *jobFault) Error() string { return e.msg }

// collect stores a finished step's logs and outputs and completes its record.
// Everything it reads the job controlled, so it reads through jobfs: never
// through a symlink, only regular files, directories and symlinks (stored
// as symlinks), within the limits above. A declared output the step did not
// create, or could not be stored within them, fails the step.
func (r *run) collect(step workflow.Step, dirs stepDirs, res *vmrunner.StepResult, sr *record.Step) error {
	// fail makes a succeeded step failed; a step that already failed (or
	// timed out, or ran out of memory) keeps its status, and detail is
	// added to why.
	fail := func(detail string) {
		switch {
		case res.Status == vmrunner.StatusSucceeded:
			res.Status, res.Detail = vmrunner.StatusFailed, detail
		case res.Detail != "":
			res.Detail += "; " + detail
		case res.HasResult && res.Result.Error != "":
			res.Detail = res.Result.Error + "; " + detail
		default:
			res.Detail = detail
		}
	}
	ctl, err := jobfs.Open(dirs.Control)
	if err != nil {
		return fmt.Errorf("store logs of step %q: %w", step.Name, err)
	}
	defer ctl.Close()
	limit := r.logLimit()
	var faults []string
	for _, l := range []struct {
		name      string
		d         *record.Digest
		truncated *int64
	}{
		{guest.StdoutFile, &sr.Logs.Stdout, &sr.Logs.StdoutTruncated},
		{guest.StderrFile, &sr.Logs.Stderr, &sr.Logs.StderrTruncated},
	} {
		var jf *jobFault
		*l.d, *l.truncated, err = r.putLog(ctl, l.name, limit, false)
		if errors.As(err, &jf) {
			faults = append(faults, jf.msg)
		} else if err != nil {
			return err
		}
	}
	d, truncated, err := r.putLog(ctl, ConsoleFile, limit, true)
	var jf *jobFault
	if errors.As(err, &jf) {
		faults = append(faults, jf.msg)
	} else if err != nil {
		return err
	}
	if d != (record.Digest{}) {
		sr.Logs.Console, sr.Logs.ConsoleTruncated = &d, truncated
	}
	for _, f := range faults {
		fail(f)
	}
	if res.Status == vmrunner.StatusSucceeded && len(step.Outputs) > 0 {
		ws, err := jobfs.Open(dirs.Workspace)
		if err != nil {
			return fmt.Errorf("store outputs of step %q: %w", step.Name, err)
		}
		defer ws.Close()
		budget := &jobfs.Budget{MaxBytes: outputLimit(step), MaxEntries: DefaultOutputEntries}
		for _, out := range step.Outputs {
			var dumpErr error
			h, size, err := r.o.Store.PutNARFunc(func(w io.Writer) error {
				dumpErr = ws.DumpNAR(w, out, budget)
				return dumpErr
			})
			if dumpErr != nil {
				fail(outputFault(out, dumpErr))
				break
			}
			if err != nil {
				return fmt.Errorf("store output %q of step %q: %w", out, step.Name, err)
			}
			sr.Outputs = append(sr.Outputs, record.Output{Path: out, NarHash: h, NarSize: size})
		}
	}
	fillStep(sr, res)
	return nil
}

// outputFault says why output out could not be stored.
func outputFault(out string, err error) string {
	var le *jobfs.LimitError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("declared output %q was not created", out)
	case errors.As(err, &le) && le.What == "bytes" && le.Used > 0:
		return fmt.Sprintf("output %q: file %q is %d bytes, which with the %d bytes of outputs before it is over the step's output limit of %d bytes (resources.disk)", out, le.Path, le.Size, le.Used, le.Limit)
	case errors.As(err, &le) && le.What == "bytes":
		return fmt.Sprintf("output %q: file %q is %d bytes, over the step's output limit of %d bytes (resources.disk)", out, le.Path, le.Size, le.Limit)
	case errors.As(err, &le):
		return fmt.Sprintf("output %q: more than the step's limit of %d files, directories and symlinks in its outputs", out, le.Limit)
	case errors.Is(err, jobfs.ErrSymlink):
		return fmt.Sprintf("output %q: %v: the host reads outputs only beneath the workspace, never through a symlink (a symlink that is itself an output is stored as a symlink)", out, err)
	case errors.Is(err, jobfs.ErrType):
		return fmt.Sprintf("output %q: %v: outputs hold only regular files, directories and symlinks", out, err)
	}
	return fmt.Sprintf("output %q: cannot be stored: %v", out, err)
}

// ConsoleFile is where the vm backend leaves the guest console in the control directory.
const ConsoleFile = "console.log"

// putLog stores the log name of the control directory as a blob: whole when
// it is at most limit bytes, else its first and last limit/2 bytes with a
// marker line between them; truncated counts the bytes left out. A missing
// log is stored empty, or not at all when optional (the digest is then
// zero). A log that is not a regular file, or is reached through a symlink,
// is not read: it is stored empty and the error is a *jobFault.
func (r *run) putLog(ctl *jobfs.Root, name string, limit int64, optional bool) (d record.Digest, truncated int64, err error) {
	f, info, err := ctl.OpenFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		if optional {
			return record.Digest{}, 0, nil
		}
		d, _, err := r.o.Store.PutBlob(bytes.NewReader(nil))
		return d, 0, err
	}
	if err != nil {
		d, _, perr := r.o.Store.PutBlob(bytes.NewReader(nil))
		if perr != nil {
			return d, 0, fmt.Errorf("store log %s: %w", name, perr)
		}
		return d, 0, &jobFault{msg: fmt.Sprintf("log %s was not read: %v", name, err)}
	}
	defer f.Close()
	var src io.Reader = io.LimitReader(f, info.Size)
	if info.Size > limit {
		head := limit / 2
		tail := limit - head
		truncated = info.Size - head - tail
		marker := fmt.Sprintf("\n[agentsandbox: %d bytes of %s left out here; the host keeps the first %d and the last %d]\n", truncated, name, head, tail)
		src = io.MultiReader(io.NewSectionReader(f, 0, head), strings.NewReader(marker), io.NewSectionReader(f, info.Size-tail, tail))
	}
	d, _, err = r.o.Store.PutBlob(src)
	if err != nil {
		return d, 0, fmt.Errorf("store log %s: %w", name, err)
	}
	return d, truncated, nil
}

// lineWriter calls fn with each complete line written to it, until limit
// bytes have passed; then it says once that the rest is not shown.
type lineWriter struct {
	mu      sync.Mutex
	buf     []byte
	fn      func(string)
	limit   int64
	written int64
}

func newLineWriter(limit int64, fn func(string)) *lineWriter {
	return &lineWriter{fn: fn, limit: limit}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.written > w.limit {
		return len(p), nil
	}
	w.written += int64(len(p))
	if w.written > w.limit {
		w.buf = nil
		w.fn(fmt.Sprintf("[agentsandbox: the step wrote more than %d bytes; the rest is not shown, and the stored logs keep its head and tail]", w.limit))
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.fn(string(bytes.TrimSuffix(w.buf[:i], []byte("\r"))))
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
		w.fn(string(bytes.TrimSuffix(w.buf, []byte("\r"))))
		w.buf = nil
	}
}

var _ io.Writer = (*lineWriter)(nil)
