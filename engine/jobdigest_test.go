package engine

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/fakebackend"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/namespace"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// TestMain builds the sandbox agent the root tier's jails start as init.
func TestMain(m *testing.M) {
	os.Exit(testtier.MainWithAgent(m))
}

// jobReader runs each step on b and then reads the job.json the step's
// agent read, from the control directory, before the engine removes it.
type jobReader struct {
	vmrunner.Backend
	t    testing.TB
	mu   sync.Mutex
	jobs map[string][]byte
}

func (j *jobReader) Open(ctx context.Context, spec vmrunner.StepSpec) (vmrunner.Sandbox, error) {
	sb, err := j.Backend.Open(ctx, spec)
	if err != nil {
		return nil, err
	}
	return readingSandbox{sb, j, spec}, nil
}

// readingSandbox reads the job.json once the step has ended.
type readingSandbox struct {
	vmrunner.Sandbox
	j    *jobReader
	spec vmrunner.StepSpec
}

func (r readingSandbox) Wait(ctx context.Context) (vmrunner.StepResult, error) {
	j, spec := r.j, r.spec
	res, err := r.Sandbox.Wait(ctx)
	b, rerr := os.ReadFile(filepath.Join(spec.ControlDir, guest.JobFile))
	if rerr != nil {
		j.t.Errorf("step %s: read job.json after the run: %v", spec.Step.Name, rerr)
	}
	j.mu.Lock()
	if j.jobs == nil {
		j.jobs = map[string][]byte{}
	}
	j.jobs[spec.Step.Name] = b
	j.mu.Unlock()
	return res, err
}

// checkJobDigests: every step's record names by jobDigest the exact bytes
// of the job.json its agent read (docs/records.md), the blob store holds
// them, and they carry the step's timeout.
func checkJobDigests(t *testing.T, store *record.Store, res *Result, jobs map[string][]byte) {
	t.Helper()
	if len(res.Record.Steps) == 0 {
		t.Fatal("no steps recorded")
	}
	for _, s := range res.Record.Steps {
		b, ok := jobs[s.Name]
		if !ok {
			t.Errorf("step %s: no job.json read", s.Name)
			continue
		}
		if got := record.Digest(sha256.Sum256(b)); got != s.JobDigest {
			t.Errorf("step %s: job.json after the run has sha256 %s, the record's jobDigest is %s", s.Name, got, s.JobDigest)
		}
		if err := store.VerifyBlob(s.JobDigest); err != nil {
			t.Errorf("step %s: job blob: %v", s.Name, err)
		}
		var j guest.Job
		if err := json.Unmarshal(b, &j); err != nil {
			t.Errorf("step %s: job.json: %v", s.Name, err)
		} else if j.TimeoutMS != 30_000 {
			t.Errorf("step %s: job.json timeout %d ms, want the step's 30000", s.Name, j.TimeoutMS)
		}
	}
}

func TestJobDigestIsWhatTheAgentRead(t *testing.T) {
	f := newFixture(t, pipelineYAML)
	jr := &jobReader{Backend: fakebackend.New(), t: t}
	res, err := Run(context.Background(), f.w, f.options(t, jr, nil))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Succeeded() {
		t.Fatalf("run %s", res.Record.Status)
	}
	checkJobDigests(t, f.store, res, jr.jobs)
}

// TestJobDigestIsWhatTheJailRead: the same with the namespace backend, whose
// jail's agent reads job.json itself.
func TestJobDigestIsWhatTheJailRead(t *testing.T) {
	testtier.Root(t)
	f := newFixture(t, pipelineYAML)
	stateDir := filepath.Join(f.dir, "hoststate")
	jr := &jobReader{Backend: namespace.New(namespace.Options{StateDir: stateDir, JailDir: filepath.Join(f.dir, "jails")}), t: t}
	o := f.options(t, jr, nil)
	o.HostStateDir = stateDir
	o.Isolation = workflow.IsolationNamespace
	res, err := Run(context.Background(), f.w, o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Succeeded() {
		for _, s := range res.Record.Steps {
			t.Logf("%s: %s %s", s.Name, s.Status, s.Detail)
		}
		t.Fatalf("run %s", res.Record.Status)
	}
	checkJobDigests(t, f.store, res, jr.jobs)
}
