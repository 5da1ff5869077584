package namespace

// Escape tests for what the host reads of a job (issue 11, first class):
// root tier, end to end through this backend and engine.Run. Each
// attack got through before the host read a job's outputs, logs and
// result through fsx/jobfs:
//   - an output declared through a symlinked parent made the host store a
//     root-only file or directory of its own;
//   - the same output, through a needs edge, was copied into the next
//     step's workspace for that job to read;
//   - an output that is a FIFO stopped the run with an error, and one
//     through the symlink at /proc/kmsg hung it;
//   - stdout was stored whole, however big;
//   - result.json was read and decoded whatever its size.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/runnertest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// rootCanary makes a root-only directory under /root holding a root-only
// file with a fresh secret, as the issue's `host/root/secret`.
func rootCanary(t *testing.T) (dir, file, secret string) {
	t.Helper()
	dir, err := os.MkdirTemp("/root", "asb-canary-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	secret = "canary-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	file = filepath.Join(dir, "secret")
	if err := os.WriteFile(file, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, file, secret
}

// pipelineRun is one apply of text on the namespace backend, with a guard
// against a host that hangs on what a job left.
type pipelineRun struct {
	res     *engine.Result
	store   *record.Store
	steps   map[string]record.Step
	console map[string]string
}

func runPipeline(t *testing.T, text string, logLimit int64) *pipelineRun {
	t.Helper()
	testtier.Root(t)
	w, err := workflow.Parse("escape.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	store, err := record.OpenStore(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	pr := &pipelineRun{store: store, steps: map[string]record.Step{}, console: map[string]string{}}
	var mu sync.Mutex
	opts := engine.Options{
		WorkflowBytes: []byte(text), Isolation: workflow.IsolationNamespace, Jobs: 2,
		Host:  engine.Host{Root: true},
		Store: store, RunRoot: filepath.Join(dir, "runs"),
		Backends:    map[workflow.Isolation]vmrunner.Backend{workflow.IsolationNamespace: newBackend(t)},
		Policy:      runnertest.Policy(t, nil),
		ToolVersion: "escape-test", LogLimit: logLimit,
		Events: func(e engine.Event) {
			if e.Kind == engine.EventLog {
				mu.Lock()
				pr.console[e.Step] += e.Line + "\n"
				mu.Unlock()
			}
		},
	}
	done := make(chan error, 1)
	go func() {
		var err error
		pr.res, err = engine.Run(context.Background(), w, opts)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the host hung on what the job left (3 minutes)")
	}
	for _, st := range pr.res.Record.Steps {
		pr.steps[st.Name] = st
	}
	return pr
}

// assertNoBlobHolds fails if any stored blob contains secret.
func (pr *pipelineRun) assertNoBlobHolds(t *testing.T, secret string) {
	t.Helper()
	filepath.WalkDir(filepath.Join(pr.store.Dir(), "blobs"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Error(err)
		} else if bytes.Contains(b, []byte(secret)) {
			t.Errorf("the store holds the host's secret in %s", p)
		}
		return nil
	})
}

func (pr *pipelineRun) assertFailed(t *testing.T, step string, want ...string) {
	t.Helper()
	st, ok := pr.steps[step]
	if !ok {
		t.Fatalf("no record of step %s", step)
	}
	if st.Status != record.StatusFailed {
		t.Errorf("step %s: %s (%q), want failed", step, st.Status, st.Detail)
	}
	for _, w := range want {
		if !strings.Contains(st.Detail, w) {
			t.Errorf("step %s: detail %q, want it to say %q", step, st.Detail, w)
		}
	}
}

func TestEscapeOutputThroughSymlinkedParent(t *testing.T) {
	testtier.Root(t)
	dir, file, secret := rootCanary(t)
	pr := runPipeline(t, fmt.Sprintf(`apiVersion: agentsandbox.dev/v1
kind: Workflow
name: escape
steps:
  - name: file
    run: ln -s / host
    outputs: [host%s]
  - name: dir
    run: ln -s / host
    outputs: [host%s]
`, file, dir), 0)
	pr.assertFailed(t, "file", "host"+file, "symlink")
	pr.assertFailed(t, "dir", "host"+dir, "symlink")
	pr.assertNoBlobHolds(t, secret)
}

func TestEscapePlacementThroughSymlink(t *testing.T) {
	testtier.Root(t)
	_, file, secret := rootCanary(t)
	pr := runPipeline(t, fmt.Sprintf(`apiVersion: agentsandbox.dev/v1
kind: Workflow
name: escape
steps:
  - name: plant
    run: ln -s / host
    outputs: [host%[1]s]
  - name: reap
    needs: [plant]
    run: cat host%[1]s; find . -type f | head
`, file), 0)
	pr.assertFailed(t, "plant", "symlink")
	if reap := pr.steps["reap"]; reap.Status != record.StatusSkipped {
		t.Errorf("reap: %s (%s), want skipped: what it needs was never stored", reap.Status, reap.Detail)
	}
	if strings.Contains(pr.console["reap"], secret) {
		t.Errorf("the next step read the host's secret:\n%s", pr.console["reap"])
	}
	pr.assertNoBlobHolds(t, secret)
}

// TestEscapeFIFOOutput: a FIFO output, and /proc/kmsg reached through a
// symlink (reading it waits for the next kernel message), must neither
// hang the host nor stop the run: the steps fail, saying why.
func TestEscapeFIFOOutput(t *testing.T) {
	testtier.Root(t)
	pr := runPipeline(t, `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: escape
steps:
  - name: fifo
    run: mkfifo fifo
    outputs: [fifo]
  - name: nested
    run: mkdir d && mkfifo d/pipe && echo ok > d/a
    outputs: [d]
  - name: kmsg
    run: ln -s / host
    outputs: [host/proc/kmsg]
`, 0)
	pr.assertFailed(t, "fifo", `output "fifo"`, "a FIFO")
	pr.assertFailed(t, "nested", `output "d"`, "d/pipe", "a FIFO")
	pr.assertFailed(t, "kmsg", "host/proc/kmsg", "symlink")
}

func TestEscapeLogFloodCapped(t *testing.T) {
	testtier.Root(t)
	const flood = 40 << 20
	pr := runPipeline(t, fmt.Sprintf(`apiVersion: agentsandbox.dev/v1
kind: Workflow
name: escape
steps:
  - name: flood
    run: head -c %d /dev/zero; yes stderr-flood | head -c %d >&2
`, flood, flood), 0)
	st := pr.steps["flood"]
	if st.Status != record.StatusSucceeded {
		t.Fatalf("flood: %s (%s)", st.Status, st.Detail)
	}
	want := int64(flood - engine.DefaultLogLimit)
	if st.Logs.StdoutTruncated != want || st.Logs.StderrTruncated != want {
		t.Errorf("truncated stdout %d, stderr %d bytes; want %d each", st.Logs.StdoutTruncated, st.Logs.StderrTruncated, want)
	}
	for _, d := range []record.Digest{st.Logs.Stdout, st.Logs.Stderr} {
		fi, err := os.Stat(pr.store.BlobPath(d))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > engine.DefaultLogLimit+256 {
			t.Errorf("a stored log is %d bytes, want at most about %d", fi.Size(), engine.DefaultLogLimit)
		}
	}
	r, err := pr.store.OpenBlob(st.Logs.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b := make([]byte, engine.DefaultLogLimit+256)
	n, _ := io.ReadFull(r, b)
	if !strings.HasPrefix(string(b[:n]), "stderr-flood\n") || !strings.Contains(string(b[:n]), fmt.Sprintf("[agentsandbox: %d bytes of stderr.log left out here", want)) {
		t.Errorf("the stored stderr does not keep its head and say what was left out")
	}
	if n := len(pr.console["flood"]); n > engine.DefaultLogLimit+(64<<10)+512 {
		t.Errorf("%d bytes reached the console, want at most about %d", n, engine.DefaultLogLimit)
	}
}

// TestEscapeResultOversized: a result.json far over guest.MaxResultSize
// (here the agent echoes a 1 MiB step name, as a guest the job took over
// could write anything) is no result, not a result decoded whatever its
// size.
func TestEscapeResultOversized(t *testing.T) {
	b, opts := rootBackend(t)
	spec := suiteOpts.Spec(t, "bigresult", runnertest.Sh("echo hi"))
	spec.Job.Step = strings.Repeat("s", 1<<20)
	res := runnertest.RunStep(t, b, spec)
	if res.HasResult || res.Status != vmrunner.StatusFailed {
		t.Errorf("status %s, has result %v: want failed without a result", res.Status, res.HasResult)
	}
	if want := fmt.Sprintf("over the limit of %d bytes", guest.MaxResultSize); !strings.Contains(res.Detail, want) {
		t.Errorf("detail %q, want it to say %q", res.Detail, want)
	}
	assertClean(t, opts, spec)
}
