package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// applyForRerun applies the workflow at path in namespace isolation and
// returns the record id.
func applyForRerun(t *testing.T, state, path string) string {
	t.Helper()
	code, out, stderr := execute(t, "apply", "--isolation", "namespace", "--state-dir", state, path)
	if code != ExitOK {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, stderr)
	}
	return lastLine(out)
}

// recordOf loads a record by id.
func recordOf(t *testing.T, state, id string) *record.Record {
	t.Helper()
	s, err := record.OpenStore(state)
	if err != nil {
		t.Fatal(err)
	}
	rid, err := record.ParseID(id)
	if err != nil {
		t.Fatalf("%q is not a record id: %v", id, err)
	}
	r, err := s.Get(rid)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRerunPipelineBitIdentical: a rerun of examples/pipeline.yaml (by an
// abbreviated id) reproduces every output bit for bit, pins the same
// workflow file and inputs, and its record's parent is the old record.
func TestRerunPipelineBitIdentical(t *testing.T) {
	testtier.Root(t)
	state := t.TempDir()
	id := applyForRerun(t, state, "../../examples/pipeline.yaml")
	code, out, stderr := execute(t, "rerun", "--state-dir", state, id[:8])
	if code != ExitOK {
		t.Fatalf("rerun: exit %d\n%s\n%s", code, out, stderr)
	}
	for _, want := range []string{"compared with " + id, "tokens.txt: identical", "counts.txt: identical", "report.txt: identical", "3 outputs identical, 0 different"} {
		if !strings.Contains(out, want) {
			t.Errorf("rerun output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(stderr, "warning:") {
		t.Errorf("rerun warned:\n%s", stderr)
	}
	old, rerun := recordOf(t, state, id), recordOf(t, state, lastLine(out))
	if rerun.Parent == nil || rerun.Parent.String() != id {
		t.Errorf("rerun's parent is %v, want %s", rerun.Parent, id)
	}
	if rerun.Workflow != old.Workflow {
		t.Errorf("rerun pins workflow %+v, the original %+v", rerun.Workflow, old.Workflow)
	}
	if len(rerun.Inputs) != 1 || rerun.Inputs[0] != old.Inputs[0] {
		t.Errorf("rerun's inputs %+v, the original's %+v", rerun.Inputs, old.Inputs)
	}
	for i := range old.Steps {
		a, b := old.Steps[i], rerun.Steps[i]
		if a.Name != b.Name || a.JobDigest != b.JobDigest || a.Isolation != b.Isolation {
			t.Errorf("step %s: job %s in %s, the rerun's %s: job %s in %s", a.Name, a.JobDigest, a.Isolation, b.Name, b.JobDigest, b.Isolation)
		}
	}

	code, out, _ = execute(t, "rerun", "--state-dir", state, "--json", id)
	if code != ExitOK || !strings.Contains(out, `{"kind":"comparison","comparison":{"parent":"`+id+`"`) {
		t.Errorf("rerun --json: exit %d, no comparison line:\n%s", code, out)
	}
}

const stampWorkflow = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: stamp
steps:
  - name: stamp
    run: |
      echo fixed > fixed.txt
      date +%N > stamp.txt
    outputs: [fixed.txt, stamp.txt]
    resources: {timeout: 30s}
MARK`

// TestRerunDeterministic: an output that differs between runs fails the
// rerun (exit 1, naming the step, output and file) when marked
// deterministic, and is only reported when not.
func TestRerunDeterministic(t *testing.T) {
	testtier.Root(t)
	for _, c := range []struct {
		name, mark string
		want       int
	}{
		{"unmarked", "", ExitOK},
		{"output marked", "    deterministic: [stamp.txt]\n", ExitStepFailed},
		{"step marked", "    deterministic: true\n", ExitStepFailed},
		{"other output marked", "    deterministic: [fixed.txt]\n", ExitOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			state := t.TempDir()
			id := applyForRerun(t, state, writeWorkflow(t, t.TempDir(), strings.ReplaceAll(stampWorkflow, "MARK", c.mark)))
			code, out, stderr := execute(t, "rerun", "--state-dir", state, id)
			if code != c.want {
				t.Fatalf("rerun: exit %d, want %d\n%s\n%s", code, c.want, out, stderr)
			}
			if !strings.Contains(out, "stamp.txt: different") && !strings.Contains(out, "stamp.txt [deterministic]: different") {
				t.Errorf("stamp.txt not reported different:\n%s", out)
			}
			if !strings.Contains(out, "modified stamp.txt  10 bytes, recorded 10 bytes") {
				t.Errorf("the differing file and its sizes are not shown:\n%s", out)
			}
			if !strings.Contains(out, "fixed.txt") || !strings.Contains(out, "1 outputs identical, 1 different") {
				t.Errorf("fixed.txt is not identical:\n%s", out)
			}
			if c.want == ExitStepFailed && !strings.Contains(stderr, `deterministic output stamp.txt of step "stamp" differs (files: stamp.txt modified)`) {
				t.Errorf("the failure does not name the output and file:\n%s", stderr)
			}
			if rid := lastLine(out); recordOf(t, state, rid).Parent.String() != id {
				t.Errorf("the new record's parent is not %s", id)
			}
		})
	}
}

const inputWorkflow = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: input
inputs:
  data: {source: data.txt}
steps:
  - name: copy
    inputs: [data]
    run: cp data copy.txt
    outputs: [copy.txt]
    resources: {timeout: 30s}
`

// copyFile copies src to dst.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// inputBlob is the path of the blob of the record's one input.
func inputBlob(t *testing.T, state string, r *record.Record) string {
	t.Helper()
	if len(r.Inputs) != 1 {
		t.Fatalf("record has inputs %+v, want one", r.Inputs)
	}
	h := r.Inputs[0].Digest.Hex()
	return filepath.Join(state, "blobs", h[:2], h)
}

// TestRerunRefetchesMissingInput: inputs come from the store, whatever
// their source holds now; one whose blob is gone needs --dir (the
// directory the workflow was applied from), is fetched from there again,
// and must have the recorded digest.
func TestRerunRefetchesMissingInput(t *testing.T) {
	testtier.Root(t)
	state, dir := t.TempDir(), t.TempDir()
	copyFile(t, "../../examples/pipeline.yaml", filepath.Join(dir, "pipeline.yaml"))
	copyFile(t, "../../examples/data/corpus.txt", filepath.Join(dir, "data", "corpus.txt"))
	id := applyForRerun(t, state, filepath.Join(dir, "pipeline.yaml"))
	blob := inputBlob(t, state, recordOf(t, state, id))
	if err := os.Remove(blob); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := execute(t, "rerun", "--state-dir", state, id)
	if code != ExitInvalid || !strings.Contains(stderr, `input "corpus": its blob sha256:`) || !strings.Contains(stderr, "pass --dir DIR") {
		t.Errorf("rerun without the blob or --dir: exit %d, want %d naming the input and --dir\n%s\n%s", code, ExitInvalid, out, stderr)
	}
	code, out, stderr = execute(t, "rerun", "--state-dir", state, "--dir", dir, id)
	if code != ExitOK || !strings.Contains(stderr, `note: input "corpus" was not in the store: fetched again from `+filepath.Join(dir, "data", "corpus.txt")) || !strings.Contains(out, "3 outputs identical, 0 different") {
		t.Fatalf("rerun refetching the input: exit %d\n%s\n%s", code, out, stderr)
	}
	if _, err := os.Stat(blob); err != nil {
		t.Errorf("the refetched input is not back in the store: %v", err)
	}

	// An unpinned input (allowed by policy data): the source changed, but
	// the blob is there, so the rerun uses the recorded content; once the
	// blob is gone, the changed source is refused against the record.
	state, dir = t.TempDir(), t.TempDir()
	unpinned := filepath.Join(t.TempDir(), "unpinned.yaml")
	if err := os.WriteFile(unpinned, []byte("agentsandbox:\n  require_pinned_inputs: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data.txt")
	if err := os.WriteFile(data, []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = execute(t, "apply", "--isolation", "namespace", "--state-dir", state, "--policy-data", unpinned, writeWorkflow(t, dir, inputWorkflow))
	if code != ExitOK {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, stderr)
	}
	id = lastLine(out)
	old := recordOf(t, state, id)
	if err := os.WriteFile(data, []byte("two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := execute(t, "rerun", "--state-dir", state, "--policy-data", unpinned, "--dir", dir, id); code != ExitOK || !strings.Contains(out, "copy.txt: identical") {
		t.Fatalf("rerun with the blob: exit %d\n%s\n%s", code, out, stderr)
	}
	if err := os.Remove(inputBlob(t, state, old)); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = execute(t, "rerun", "--state-dir", state, "--policy-data", unpinned, "--dir", dir, id)
	if code != ExitInvalid || !strings.Contains(stderr, `input "data" fetched again from `+data) || !strings.Contains(stderr, "the record has file "+old.Inputs[0].Digest.String()) {
		t.Errorf("rerun with a changed source: exit %d, want %d naming both digests\n%s\n%s", code, ExitInvalid, out, stderr)
	}
}

// TestRerunPolicyChanged: a policy bundle other than the recorded one is
// a warning naming both digests, or a refusal with --require-same-policy.
func TestRerunPolicyChanged(t *testing.T) {
	testtier.Root(t)
	state := t.TempDir()
	id := applyForRerun(t, state, writeWorkflow(t, t.TempDir(), strings.ReplaceAll(stampWorkflow, "MARK", "")))
	was := recordOf(t, state, id).Policy.BundleDigest
	data := filepath.Join(t.TempDir(), "data.yaml")
	if err := os.WriteFile(data, []byte("agentsandbox:\n  warn_no_timeout: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	code, out, stderr := execute(t, "rerun", "--state-dir", state, "--policy-data", data, id)
	if code != ExitOK {
		t.Fatalf("rerun: exit %d\n%s\n%s", code, out, stderr)
	}
	now := recordOf(t, state, lastLine(out)).Policy.BundleDigest
	if now == was {
		t.Fatalf("the policy data did not change the bundle digest %s", was)
	}
	want := "warning: the policy bundle is " + now + ", the record was admitted under " + was + ": the admission may differ"
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}

	before, _ := filepath.Glob(filepath.Join(state, "records", "*"))
	code, out, stderr = execute(t, "rerun", "--state-dir", state, "--policy-data", data, "--require-same-policy", id)
	if code != ExitInvalid || !strings.Contains(stderr, "--require-same-policy: the policy bundle is "+now) || out != "" {
		t.Errorf("--require-same-policy: exit %d, want %d\n%s\n%s", code, ExitInvalid, out, stderr)
	}
	if after, _ := filepath.Glob(filepath.Join(state, "records", "*")); len(after) != len(before) {
		t.Errorf("a refused rerun wrote a record: %d records, were %d", len(after), len(before))
	}

	// The same policy: no warning, and the flag lets it run.
	code, out, stderr = execute(t, "rerun", "--state-dir", state, "--require-same-policy", id)
	if code != ExitOK || strings.Contains(stderr, "policy bundle") {
		t.Errorf("rerun under the recorded policy: exit %d\n%s\n%s", code, out, stderr)
	}
}

// TestRerunWorkflowPolicyDir: a workflow's own .agentsandbox/policy is not
// beside the rerun's copy of it; --dir names the directory it was applied
// from, and its rules are loaded again.
func TestRerunWorkflowPolicyDir(t *testing.T) {
	testtier.Root(t)
	state, dir := t.TempDir(), t.TempDir()
	rule := "package agentsandbox.team\n\nwarn contains msg if {\n\tsome step in input.workflow.steps\n\tmsg := sprintf(\"team: step %q checked\", [step.name])\n}\n"
	if err := os.MkdirAll(filepath.Join(dir, ".agentsandbox", "policy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".agentsandbox", "policy", "team.rego"), []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	id := applyForRerun(t, state, writeWorkflow(t, dir, strings.ReplaceAll(stampWorkflow, "MARK", "")))

	code, out, stderr := execute(t, "rerun", "--state-dir", state, "--require-same-policy", id)
	if code != ExitInvalid || !strings.Contains(stderr, "the policy bundle is") {
		t.Errorf("rerun without --dir: exit %d, want %d (the team's rules are not loaded)\n%s\n%s", code, ExitInvalid, out, stderr)
	}
	code, out, stderr = execute(t, "rerun", "--state-dir", state, "--require-same-policy", "--dir", dir, id)
	if code != ExitOK || !strings.Contains(stderr, `warning: team: step "stamp" checked`) {
		t.Errorf("rerun with --dir: exit %d, want the team's warning\n%s\n%s", code, out, stderr)
	}
}

// TestRerunIsolation: the recorded isolation is kept, forced when the host
// resolves auto differently and the record has one level, and a mix that
// cannot be forced is said.
func TestRerunIsolation(t *testing.T) {
	const src = "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: i\nnixpkgs: github:NixOS/nixpkgs/8f3e1f807051e32d8c95cd12b9b421623850a34d\nsteps:\n  - {name: a, run: x}\n  - {name: b, run: x, isolation: %s}\n"
	noKVM := engine.Host{Root: true, Nix: true, QEMU: true}
	kvm := engine.Host{Root: true, Nix: true, QEMU: true, KVMUsable: true}
	steps := func(a, b string) *record.Record {
		return &record.Record{Steps: []record.Step{{Name: "a", Isolation: a}, {Name: "b", Isolation: b}}}
	}
	for _, c := range []struct {
		name, bIso string
		old        *record.Record
		flag       workflow.Isolation
		host       engine.Host
		want       workflow.Isolation
		warning    string
	}{
		{"same", "auto", steps("namespace", "namespace"), "", noKVM, "", ""},
		{"forced", "auto", steps("vm", "vm"), "", noKVM, "vm", "a (recorded vm, now namespace), b (recorded vm, now namespace); forcing vm, as recorded"},
		{"mixed", "vm", steps("namespace", "vm"), "", kvm, "", "a (recorded namespace, now vm); the record mixes levels"},
		{"cannot force", "auto", steps("vm", "vm"), "", engine.Host{Root: true}, "", "vm isolation cannot run here, so the steps run as this host resolves them"},
		{"flag", "auto", steps("vm", "vm"), "namespace", kvm, "namespace", "--isolation namespace runs steps in other isolation than the record: a (recorded vm, now namespace)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, err := workflow.Parse("i.yaml", []byte(fmt.Sprintf(src, c.bIso)))
			if err != nil {
				t.Fatal(err)
			}
			var warnings []string
			got, err := rerunIsolation(w, c.old, c.flag, c.host, func(f string, a ...any) { warnings = append(warnings, fmt.Sprintf(f, a...)) })
			if err != nil || got != c.want {
				t.Errorf("isolation %q (%v), want %q", got, err, c.want)
			}
			switch {
			case c.warning == "" && len(warnings) > 0:
				t.Errorf("warned %q", warnings)
			case c.warning != "" && (len(warnings) != 1 || !strings.Contains(warnings[0], c.warning)):
				t.Errorf("warnings %q, want one with %q", warnings, c.warning)
			}
		})
	}
}

// TestCompareRuns: outputs in both runs are identical or different (with
// their files); a deterministic step that ends differently, or whose
// deterministic output differs or is missing, is a failure; the others are
// reported only.
func TestCompareRuns(t *testing.T) {
	store, err := record.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	put := func(content string) record.NarHash {
		p := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		h, _, err := store.PutNAR(p)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	one, two, same := put("one\n"), put("two!\n"), put("same\n")
	w, err := workflow.Parse("c.yaml", []byte(`apiVersion: agentsandbox.dev/v1
kind: Workflow
name: c
steps:
  - {name: det, run: x, outputs: [a, b, gone], deterministic: [a, gone]}
  - {name: loose, run: x, outputs: [a]}
  - {name: ends, run: x, deterministic: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	a := &record.Record{Steps: []record.Step{
		{Name: "det", Status: record.StatusSucceeded, Outputs: []record.Output{{Path: "a", NarHash: one}, {Path: "b", NarHash: same}, {Path: "gone", NarHash: same}}},
		{Name: "loose", Status: record.StatusSucceeded, Outputs: []record.Output{{Path: "a", NarHash: one}}},
		{Name: "ends", Status: record.StatusSucceeded},
	}}
	b := &record.Record{Steps: []record.Step{
		{Name: "det", Status: record.StatusSucceeded, Outputs: []record.Output{{Path: "a", NarHash: two}, {Path: "b", NarHash: same}}},
		{Name: "loose", Status: record.StatusSucceeded, Outputs: []record.Output{{Path: "a", NarHash: two}}},
		{Name: "ends", Status: record.StatusFailed, ExitCode: 3},
	}}
	c, err := compareRuns(store, w, record.ID{}, a, b)
	if err != nil {
		t.Fatal(err)
	}
	wantFailures := []string{
		`deterministic output a of step "det" differs (files: a modified)`,
		`deterministic output gone of step "det" is missing from the rerun`,
		`deterministic step "ends" ended failed (exit 3), the recorded run succeeded (exit 0)`,
	}
	if strings.Join(c.Failures, "\n") != strings.Join(wantFailures, "\n") {
		t.Errorf("failures\n%s\nwant\n%s", strings.Join(c.Failures, "\n"), strings.Join(wantFailures, "\n"))
	}
	if c.Identical != 1 || c.Different != 2 {
		t.Errorf("%d identical, %d different; want 1 and 2", c.Identical, c.Different)
	}
	var out bytes.Buffer
	printComparison(&out, c)
	for _, want := range []string{
		"  det [deterministic]: succeeded, exit 0 (same)\n    a [deterministic]: different\n      modified a  5 bytes, recorded 4 bytes\n    b: identical\n    gone [deterministic]: only-in-parent\n",
		"  ends [deterministic]: failed, exit 3 (recorded: succeeded, exit 0)\n",
		"  loose: succeeded, exit 0 (same)\n    a: different\n",
		"1 outputs identical, 2 different\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
