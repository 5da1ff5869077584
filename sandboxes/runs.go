package sandboxes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// A run is a whole workflow applied by the server, as `agentsandbox
// apply` would: every step in its own sandbox, admitted by the policy,
// recorded. It is how an agent that has a workflow file (or writes one)
// runs it without a shell on the host: the MCP tool run_workflow and POST
// /v1/runs. A run is not a long-lived sandbox: it ends when its steps do,
// and its result names its execution record.

// RunRequest is a workflow to run. Exactly one of Workflow and Inline is
// set.
type RunRequest struct {
	// Workflow is a workflow file in the server's template directory,
	// as a relative path ("ci.yaml"); its file inputs are resolved there.
	Workflow string `json:"workflow,omitempty"`
	// Inline is a workflow's YAML itself, an API caller's: its inputs
	// are fetched under the policy's api_inputs (inputs.go). Its file
	// inputs are resolved in the template directory too, so a server
	// without one refuses them.
	Inline string `json:"inline,omitempty"`
	// Isolation overrides every step's (namespace, vm or auto).
	Isolation string `json:"isolation,omitempty"`
}

// RunInfo is a finished run.
type RunInfo struct {
	// Record is the run's execution record (records show, verify); empty
	// only when the run stopped before it could write one.
	Record   string    `json:"record,omitempty"`
	Workflow string    `json:"workflow"` // the workflow's name
	Status   string    `json:"status"`   // as a record's: succeeded, failed, timeout, oom, error
	Error    string    `json:"error,omitempty"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Steps    []RunStep `json:"steps"`
}

// RunStep is one step of a run: how it ended, the tail of its output, and
// its outputs' NAR hashes.
type RunStep struct {
	Name       string      `json:"name"`
	Isolation  string      `json:"isolation"`
	Status     string      `json:"status"`
	ExitCode   int         `json:"exitCode"`
	Signal     string      `json:"signal,omitempty"`
	DurationMS int64       `json:"durationMs"`
	Stdout     string      `json:"stdout"`
	Stderr     string      `json:"stderr"`
	Outputs    []RunOutput `json:"outputs"`
	Detail     string      `json:"detail,omitempty"`
}

// RunOutput is one output a step left.
type RunOutput struct {
	Path    string `json:"path"`
	NarHash string `json:"narHash"`
	Size    int64  `json:"narSize"`
}

// RunTail is how much of the end of each step's stdout and stderr a
// RunInfo carries (the record keeps the whole, up to the log limit).
const RunTail = 16 << 10

// MaxInlineWorkflow bounds an inline workflow.
const MaxInlineWorkflow = 512 << 10

// Runner is the part of the real manager that runs workflows.
type Runner interface {
	Run(ctx context.Context, r RunRequest) (RunInfo, error)
}

// Run applies a workflow and returns when it has ended. The run holds one
// of the server's MaxRuns places while it runs, taken before its workflow
// is read or parsed: a server at its limit refuses at once, whatever the
// request holds. A server that is stopping cancels it (its record then
// says so).
func (m *manager) Run(ctx context.Context, r RunRequest) (RunInfo, error) {
	who := caller(ctx)
	m.mu.Lock()
	switch {
	case m.closing:
		m.mu.Unlock()
		return RunInfo{}, Errorf(CodeStopped, "the server is stopping")
	case m.runs >= m.o.MaxRuns:
		m.mu.Unlock()
		return RunInfo{}, Errorf(CodeLimit, "this server already runs %d workflows, its limit; wait for one to finish", m.o.MaxRuns)
	case who.MaxRuns > 0 && m.runsBy[who.Name] >= who.MaxRuns:
		n := m.runsBy[who.Name]
		m.mu.Unlock()
		return RunInfo{}, Errorf(CodeLimit, "identity %s already runs %d workflows, its limit (max_runs %d); wait for one to finish", who.Name, n, who.MaxRuns)
	}
	m.runs++
	m.runsBy[who.Name]++
	m.runsWG.Add(1)
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.runs--
		if m.runsBy[who.Name]--; m.runsBy[who.Name] <= 0 {
			delete(m.runsBy, who.Name)
		}
		m.mu.Unlock()
		m.runsWG.Done()
	}()
	w, raw, path, err := m.runWorkflow(r)
	if err != nil {
		return RunInfo{}, err
	}
	// A caller that gave up while the workflow was parsed costs nothing
	// more (the parse itself is bounded: workflow.MaxAliasNodes).
	if err := ctx.Err(); err != nil {
		return RunInfo{}, fmt.Errorf("run workflow %s: %w", w.Name, err)
	}
	if _, err := m.authorize(ctx, nil, policy.Action{Action: policy.ActionRunWorkflow,
		Workflow: &policy.ActionWorkflow{Name: w.Name, Hash: w.Hash().String(), Steps: stepNames(w)}}); err != nil {
		return RunInfo{}, err
	}
	// One policy for the whole run: its admission and, for an inline
	// workflow (an API caller's, not the operator's), its inputs.
	pol := m.policy()
	var apiFetch engine.FetchFunc
	if r.Inline != "" {
		if apiFetch, err = m.apiFetch(pol, w, m.owned(who)); err != nil {
			return RunInfo{}, err
		}
	}
	// The run outlives neither its caller nor the server.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-m.stop:
			cancel()
		case <-ctx.Done():
		}
	}()

	eo := m.o.Engine
	eo.WorkflowPath, eo.WorkflowBytes = path, raw
	eo.Isolation = workflow.Isolation(r.Isolation)
	eo.Owner = who.Name
	if pol != nil {
		eo.Policy = pol
	}
	if apiFetch != nil {
		eo.Fetch = apiFetch
	}
	eo.Events = nil
	if m.o.Realiser != nil {
		eo.Realise = m.o.Realiser(w, path)
	}
	res, err := engine.Run(ctx, w, eo)
	if res == nil {
		if err == nil {
			err = errors.New("the engine returned no result")
		}
		return RunInfo{}, openError(err)
	}
	m.share(res.ID)
	if r.Inline != "" && err != nil {
		if aerr := apiRunError(err, res.ID); aerr != nil {
			return RunInfo{}, aerr
		}
	}
	info := m.runInfo(res)
	if err != nil && info.Error == "" {
		info.Error = err.Error()
	}
	return info, nil
}

// runWorkflow reads and parses the request's workflow, and says where it
// lives (file inputs resolve beside it).
func (m *manager) runWorkflow(r RunRequest) (*workflow.Workflow, []byte, string, error) {
	switch r.Isolation {
	case "", string(workflow.IsolationNamespace), string(workflow.IsolationVM), string(workflow.IsolationAuto):
	default:
		return nil, nil, "", Errorf(CodeBadRequest, "isolation %q: want namespace, vm or auto", r.Isolation)
	}
	var raw []byte
	var path string
	switch {
	case (r.Workflow == "") == (r.Inline == ""):
		return nil, nil, "", Errorf(CodeBadRequest, "give exactly one of workflow (a file in the server's template directory) and inline (the workflow's YAML)")
	case r.Inline != "":
		if len(r.Inline) > MaxInlineWorkflow {
			return nil, nil, "", Errorf(CodeTooLarge, "the inline workflow is %d bytes, over the %d this server takes", len(r.Inline), MaxInlineWorkflow)
		}
		raw = []byte(r.Inline)
		// Not a file: a name for messages and the base of file inputs,
		// which the server's fetcher confines to the template directory.
		path = filepath.Join(m.o.TemplateDir, "inline-workflow.yaml")
		if m.o.TemplateDir == "" {
			path = "inline-workflow.yaml"
		}
	default:
		if m.o.TemplateDir == "" {
			return nil, nil, "", Errorf(CodeBadRequest, "workflow %q: this server takes no workflow files; start it with --templates DIR to allow files from DIR, or send the workflow inline", r.Workflow)
		}
		if err := checkLength("workflow file", r.Workflow); err != nil {
			return nil, nil, "", err
		}
		if !filepath.IsLocal(r.Workflow) {
			return nil, nil, "", Errorf(CodeBadRequest, "workflow %q: want a relative path inside the server's template directory", r.Workflow)
		}
		root, err := os.OpenRoot(m.o.TemplateDir)
		if err != nil {
			return nil, nil, "", Errorf(CodeInternal, "template directory: %v", err)
		}
		defer root.Close()
		f, err := root.Open(r.Workflow)
		if err != nil {
			return nil, nil, "", Errorf(CodeNotFound, "workflow %q: %v", r.Workflow, err)
		}
		defer f.Close()
		if raw, err = io.ReadAll(io.LimitReader(f, MaxInlineWorkflow+1)); err != nil {
			return nil, nil, "", Errorf(CodeInternal, "workflow %q: %v", r.Workflow, err)
		}
		if len(raw) > MaxInlineWorkflow {
			return nil, nil, "", Errorf(CodeTooLarge, "workflow %q is over %d bytes", r.Workflow, MaxInlineWorkflow)
		}
		path = filepath.Join(m.o.TemplateDir, r.Workflow)
	}
	w, err := workflow.Parse(filepath.Base(path), raw)
	if err != nil {
		return nil, nil, "", Errorf(CodeBadRequest, "%v", err)
	}
	return w, raw, path, nil
}

// runInfo summarises a finished run from its record, with the tail of
// each step's streams from the blob store.
func (m *manager) runInfo(res *engine.Result) RunInfo {
	rec := res.Record
	info := RunInfo{Record: res.ID.String(), Workflow: rec.Workflow.Name, Status: string(rec.Status),
		Error: rec.Error, Started: rec.Started, Finished: rec.Finished, Steps: []RunStep{}}
	store := m.o.Engine.Store
	for _, s := range rec.Steps {
		rs := RunStep{Name: s.Name, Isolation: s.Isolation, Status: string(s.Status), ExitCode: s.ExitCode,
			Signal: s.Signal, Detail: s.Detail, Outputs: []RunOutput{}}
		if !s.Started.IsZero() && !s.Finished.IsZero() {
			rs.DurationMS = s.Finished.Sub(s.Started).Milliseconds()
		}
		rs.Stdout = blobTail(store, s.Logs.Stdout)
		rs.Stderr = blobTail(store, s.Logs.Stderr)
		for _, o := range s.Outputs {
			rs.Outputs = append(rs.Outputs, RunOutput{Path: o.Path, NarHash: o.NarHash.String(), Size: o.NarSize})
		}
		info.Steps = append(info.Steps, rs)
	}
	return info
}

// blobTail is the last RunTail bytes of a log blob, as text (bytes that
// are not UTF-8 are replaced); "" for no blob.
func blobTail(s *record.Store, d record.Digest) string {
	if d.IsZero() {
		return ""
	}
	rc, err := s.OpenBlob(d)
	if err != nil {
		return fmt.Sprintf("[log %s unreadable: %v]", d, err)
	}
	defer rc.Close()
	var tail bytes.Buffer
	buf := make([]byte, 32<<10)
	cut := false
	for {
		n, err := rc.Read(buf)
		tail.Write(buf[:n])
		if tail.Len() > 2*RunTail {
			keep := tail.Bytes()[tail.Len()-RunTail:]
			tail = *bytes.NewBuffer(append([]byte(nil), keep...))
			cut = true
		}
		if err != nil {
			break
		}
	}
	b := tail.Bytes()
	if len(b) > RunTail {
		b, cut = b[len(b)-RunTail:], true
	}
	text := strings.ToValidUTF8(string(b), "\uFFFD")
	if cut {
		text = "[...]" + text
	}
	return text
}

func stepNames(w *workflow.Workflow) []string {
	out := make([]string, len(w.Steps))
	for i, s := range w.Steps {
		out[i] = s.Name
	}
	return out
}
