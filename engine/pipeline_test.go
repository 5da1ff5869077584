package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentsandbox/agentsandbox/inputs"
	"github.com/agentsandbox/agentsandbox/internal/fakebackend"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// pipelineYAML passes a checksummed input through three steps; the last
// step checks that its workspace holds exactly what it declared.
const pipelineYAML = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: pipeline
inputs:
  words:
    source: words.txt
    sha256: %SHA%
steps:
  - name: count
    inputs: [words]
    run: wc -w < words > count.txt; echo counted
    outputs: [count.txt]
    resources: {timeout: 30s}
  - name: double
    needs: [count]
    run: echo $(( $(cat count.txt) * 2 )) > double.txt; echo scratch > scratch.txt
    outputs: [double.txt]
    resources: {timeout: 30s}
  - name: report
    needs: [double]
    run: |
      test "$(ls -A | sort | tr '\n' ' ')" = "double.txt " || { ls -A; exit 9; }
      mkdir -p out && echo "double is $(cat double.txt)" > out/report.txt
    outputs: [out]
    resources: {timeout: 30s}
`

type fixture struct {
	dir   string
	store *record.Store
	path  string
	w     *workflow.Workflow
	raw   []byte
}

func newFixture(t *testing.T, text string) *fixture {
	t.Helper()
	dir := t.TempDir()
	words := []byte("alpha beta gamma\n")
	if err := os.WriteFile(filepath.Join(dir, "words.txt"), words, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(words)
	text = strings.ReplaceAll(text, "%SHA%", hex.EncodeToString(sum[:]))
	path := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	w, raw, err := workflow.ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	store, err := record.OpenStore(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{dir: dir, store: store, path: path, w: w, raw: raw}
}

func (f *fixture) options(t testing.TB, b vmrunner.Backend, events func(Event)) Options {
	fetcher := &inputs.Fetcher{Store: f.store, Limits: inputs.DefaultLimits}
	return Options{
		WorkflowPath: f.path, WorkflowBytes: f.raw, Jobs: 2,
		Host: Host{Root: true}, Store: f.store, RunRoot: filepath.Join(f.dir, "runs"),
		Backends: map[workflow.Isolation]vmrunner.Backend{workflow.IsolationNamespace: b},
		Fetch: func(ctx context.Context, in workflow.Input, dir string) (record.Input, string, error) {
			got, err := fetcher.Fetch(ctx, in, filepath.Dir(f.path), filepath.Join(dir, "content"))
			return got.Input, got.Path, err
		},
		Policy:      defaultPolicy(t),
		ToolVersion: "test", Events: events,
	}
}

// policyWithData is the built-in policy with the JSON data over its own.
func policyWithData(t testing.TB, data string) *policy.Engine {
	t.Helper()
	p := filepath.Join(t.TempDir(), "data.json")
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := policy.Load(context.Background(), policy.Options{DataFiles: []string{p}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// defaultPolicy is the built-in admission policy.
func defaultPolicy(t testing.TB) *policy.Engine {
	t.Helper()
	e, err := policy.Load(context.Background(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestRunPassesOutputsAndRecords(t *testing.T) {
	f := newFixture(t, pipelineYAML)
	var mu sync.Mutex
	var logs []string
	res, err := Run(context.Background(), f.w, f.options(t, fakebackend.New(), func(e Event) {
		if e.Kind == EventLog {
			mu.Lock()
			logs = append(logs, e.Step+": "+e.Line)
			mu.Unlock()
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Succeeded() {
		for _, s := range res.Record.Steps {
			t.Logf("%s: %s exit %d %s", s.Name, s.Status, s.ExitCode, s.Detail)
		}
		t.Fatal("run did not succeed")
	}
	if !strings.Contains(strings.Join(logs, "\n"), "count: counted") {
		t.Errorf("log events: %q", logs)
	}
	got, err := f.store.Get(res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Inputs) != 1 || got.Inputs[0].Name != "words" {
		t.Errorf("inputs: %+v", got.Inputs)
	}
	report := got.Steps[2]
	if report.Name != "report" || len(report.Outputs) != 1 || report.Outputs[0].Path != "out" {
		t.Fatalf("report step: %+v", report)
	}
	if _, ok := report.Inputs["double.txt"]; !ok || len(report.Inputs) != 1 {
		t.Errorf("report's input digests: %v", report.Inputs)
	}
	if problems, err := f.store.Verify(res.ID); err != nil || len(problems) != 0 {
		t.Fatalf("verify: %v %v", problems, err)
	}
	out := filepath.Join(f.dir, "export")
	exportTo(t, f.store, res.ID, out)
	b, err := os.ReadFile(filepath.Join(out, "report", "out", "report.txt"))
	if err != nil || string(b) != "double is 6\n" {
		t.Fatalf("exported report: %q %v", b, err)
	}
	if entries, _ := os.ReadDir(filepath.Join(f.dir, "runs")); len(entries) != 0 {
		t.Errorf("run directories left behind: %v", entries)
	}
}

func TestRunFailureSkipsDependentsAndMissingOutputFails(t *testing.T) {
	text := strings.Replace(pipelineYAML, "echo scratch > scratch.txt", "rm -f double.txt", 1)
	f := newFixture(t, text)
	res, err := Run(context.Background(), f.w, f.options(t, fakebackend.New(), nil))
	if err != nil {
		t.Fatal(err)
	}
	st := res.Record.Steps
	if st[0].Status != record.StatusSucceeded || st[1].Status != record.StatusFailed || st[2].Status != record.StatusSkipped {
		t.Fatalf("statuses: %s %s %s", st[0].Status, st[1].Status, st[2].Status)
	}
	if !strings.Contains(st[1].Detail, `declared output "double.txt" was not created`) {
		t.Errorf("detail: %q", st[1].Detail)
	}
	if res.Record.Status != record.StatusFailed {
		t.Errorf("run status %s", res.Record.Status)
	}
}

func TestRunInfrastructureErrorIsRecorded(t *testing.T) {
	f := newFixture(t, pipelineYAML)
	b := fakebackend.New()
	b.Fail = map[string]error{"double": errors.New("jail broke")}
	res, err := Run(context.Background(), f.w, f.options(t, b, nil))
	if err == nil || !strings.Contains(err.Error(), "jail broke") {
		t.Fatalf("err = %v", err)
	}
	if res == nil || res.Record.Status != record.StatusError {
		t.Fatalf("result: %+v", res)
	}
	if _, err := f.store.Get(res.ID); err != nil {
		t.Fatal(err)
	}
}

// TestRunGivesEgressToTheStep: a namespace step with network.allow runs
// with its gateway (the backend starts it in the step's namespace), and
// its record names the step's rules, the policy's forbidden entries and
// the audit log's blob; a vm step with egress is not refused (the vm
// backend starts its gateway on the guest's tap), and rules the proxy
// cannot enforce are.
func TestRunGivesEgressToTheStep(t *testing.T) {
	text := strings.Replace(pipelineYAML, "    resources: {timeout: 30s}\n", "    network: {allow: [\"198.51.100.3:443\"]}\n    resources: {timeout: 30s, bandwidth: 8Mbit}\n", 1)
	f := newFixture(t, text)
	b := fakebackend.New()
	o := f.options(t, b, nil)
	o.Policy = policyWithData(t, `{"agentsandbox": {"egress_deny": ["169.254.0.0/16"]}}`)
	res, err := Run(context.Background(), f.w, o)
	if err != nil {
		t.Fatal(err)
	}
	runs := b.Runs()
	if len(runs) != 3 || runs[0].Step.Name != "count" || runs[0].Egress == nil {
		t.Fatalf("the step with network.allow ran without its egress: %+v", runs)
	}
	for _, r := range runs[1:] {
		if r.Egress != nil {
			t.Errorf("step %q without network.allow got egress", r.Step.Name)
		}
	}
	var count record.Step
	for _, s := range res.Record.Steps {
		if s.Name == "count" {
			count = s
		}
	}
	n := count.Network
	if n == nil || fmt.Sprint(n.Allow) != "[198.51.100.3:443]" || fmt.Sprint(n.Deny) != "[169.254.0.0/16]" || n.Bandwidth != 1_000_000 {
		t.Fatalf("step record's network = %+v", n)
	}
	if !f.store.HasBlob(n.Log) {
		t.Errorf("the network log's blob %s is not in the store", n.Log)
	}

	vmStep := workflow.Step{Name: "fetch", Isolation: workflow.IsolationVM, Network: workflow.Network{Allow: []string{"example.com:443"}}}
	if err := refuse([]workflow.Step{vmStep}, Options{Backends: map[workflow.Isolation]vmrunner.Backend{workflow.IsolationVM: b}}); err != nil {
		t.Fatalf("vm step with egress (its backend starts the gateway on the guest's tap): refused: %v", err)
	}
	star := workflow.Step{Name: "open", Isolation: workflow.IsolationNamespace, Network: workflow.Network{Allow: []string{"*"}}}
	if err := refuse([]workflow.Step{star}, Options{Backends: map[workflow.Isolation]vmrunner.Backend{workflow.IsolationNamespace: b}}); err == nil || !strings.Contains(err.Error(), "cannot be enforced") {
		t.Fatalf(`namespace step with network.allow "*" (a policy that admits it): err = %v, want a refusal`, err)
	}
}

func TestPlacementsCollide(t *testing.T) {
	steps := map[string]workflow.Step{
		"a": {Name: "a", Outputs: []string{"data"}},
		"b": {Name: "b", Outputs: []string{"data/x"}},
	}
	s := workflow.Step{Name: "c", Needs: []string{"a", "b"}}
	_, err := placements(s, nil, nil, steps, nil)
	if err == nil || !strings.Contains(err.Error(), "both land at") {
		t.Fatalf("err = %v", err)
	}
}
