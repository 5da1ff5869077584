package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/record"
)

// TestRecordsDiffStored compares two stored records without running
// anything: the sample record and a copy whose step failed.
func TestRecordsDiffStored(t *testing.T) {
	raw, err := os.ReadFile("../../record/testdata/record.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s, err := record.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := record.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := record.Decode(raw)
	b.Steps[0].Status, b.Steps[0].ExitCode = record.StatusFailed, 3
	ida, err := s.Put(a)
	if err != nil {
		t.Fatal(err)
	}
	idb, err := s.Put(b)
	if err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI(t, "records", "diff", "--state-dir", dir, ida.String()[:6], idb.String())
	if code != ExitOK {
		t.Fatalf("records diff: exit %d: %s", code, stderr)
	}
	want := fmt.Sprintf("a  %s (rerun of %s)\nb  %s (rerun of %s)\nstep %s\n  status: succeeded -> failed\n  exitCode: 0 -> 3\n",
		ida, a.Parent, idb, b.Parent, b.Steps[0].Name)
	if out != want {
		t.Errorf("records diff:\n%s\nwant:\n%s", out, want)
	}
	if code, _, _ := runCLI(t, "records", "diff", "--state-dir", dir, "--exit-code", ida.String(), idb.String()); code != ExitStepFailed {
		t.Errorf("--exit-code on runs that differ: exit %d, want %d", code, ExitStepFailed)
	}
	code, out, _ = runCLI(t, "records", "diff", "--state-dir", dir, "--exit-code", ida.String(), ida.String())
	if code != ExitOK || !strings.Contains(out, "\nidentical\n") {
		t.Errorf("a run against itself: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "records", "diff", "--state-dir", dir, "--json", ida.String(), idb.String())
	var d record.RecordDiff
	if err := json.Unmarshal([]byte(out), &d); code != ExitOK || err != nil {
		t.Fatalf("--json: exit %d, %v\n%s", code, err, out)
	}
	if d.A != ida || d.B != idb || d.Identical || len(d.Steps) != 1 || len(d.Steps[0].Fields) != 2 {
		t.Errorf("--json: %+v", d)
	}
	if code, _, stderr := runCLI(t, "records", "diff", "--state-dir", dir, ida.String()); code != ExitInvalid || !strings.Contains(stderr, "accepts 2 arg") {
		t.Errorf("one id: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, "records", "diff", "--state-dir", dir, ida.String(), "zzzz"); code != ExitInvalid {
		t.Errorf("unknown id: exit %d, %s", code, stderr)
	}
}

const diffWorkflow = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: diffme
steps:
  - name: make
    isolation: namespace
    run: |
      mkdir -p out
      echo same > out/same.txt
      echo %s > out/greeting.txt
    outputs:
      - out
    resources:
      timeout: 30s
`

// TestRecordsDiffApplies runs a workflow three times, the third with one
// output file changed, and compares the runs.
func TestRecordsDiffApplies(t *testing.T) {
	testtier.Root(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	apply := func(greeting string) string {
		t.Helper()
		p := filepath.Join(dir, greeting+".yaml")
		if err := os.WriteFile(p, []byte(fmt.Sprintf(diffWorkflow, greeting)), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, stderr := execute(t, "apply", "--isolation", "namespace", "--state-dir", state, p)
		if code != ExitOK {
			t.Fatalf("apply: exit %d\n%s\n%s", code, out, stderr)
		}
		return lastLine(out)
	}
	a, again, b := apply("hello"), apply("hello"), apply("goodbye")

	// The same workflow twice: only measurements differ.
	code, out, stderr := execute(t, "records", "diff", "--exit-code", "--state-dir", state, a, again)
	if code != ExitOK || !strings.Contains(out, "\nidentical") {
		t.Errorf("two runs of one workflow: exit %d\n%s%s", code, out, stderr)
	}

	code, out, stderr = execute(t, "records", "diff", "--state-dir", state, a[:8], b[:8])
	if code != ExitOK {
		t.Fatalf("records diff: exit %d\n%s", code, stderr)
	}
	for _, want := range []string{
		"a  " + a + "\n", "b  " + b + "\n",
		"workflow\n", `  ~ steps.make.run: "mkdir -p out\necho same > out/same.txt\necho hello > out/greeting.txt\n" -> "mkdir`,
		"step make\n", "  output out: changed, sha256-",
		"    ~ greeting.txt: contents 6 B -> 8 B (+2 B)\n",
		// Measurements: which ones differ depends on the runs (two step
		// durations can be equal to the millisecond), but the step's CPU
		// time, in nanoseconds, practically always does.
		"  measured: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("records diff lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "~ same.txt") || strings.Contains(out, "identical") {
		t.Errorf("records diff lists what did not change:\n%s", out)
	}
	if code, _, _ := execute(t, "records", "diff", "--exit-code", "--state-dir", state, a, b); code != ExitStepFailed {
		t.Errorf("--exit-code: exit %d, want %d", code, ExitStepFailed)
	}

	code, out, _ = execute(t, "records", "diff", "--json", "--state-dir", state, a, b)
	var d record.RecordDiff
	if err := json.Unmarshal([]byte(out), &d); code != ExitOK || err != nil {
		t.Fatalf("--json: exit %d, %v\n%s", code, err, out)
	}
	if d.Identical || d.Workflow == nil || len(d.Workflow.Fields) != 1 || d.Workflow.Fields[0].Path != "steps.make.run" {
		t.Errorf("--json workflow: %+v", d.Workflow)
	}
	if len(d.Steps) != 1 || len(d.Steps[0].Outputs) != 1 {
		t.Fatalf("--json steps: %+v", d.Steps)
	}
	files := d.Steps[0].Outputs[0].Files
	if files == nil || len(files.Files) != 1 {
		t.Fatalf("--json output files: %+v", files)
	}
	f := files.Files[0]
	if f.Path != "greeting.txt" || f.Change != record.ChangeModified || f.SizeA != 6 || f.SizeB != 8 ||
		*f.DigestA != record.DigestOf([]byte("hello\n")) || *f.DigestB != record.DigestOf([]byte("goodbye\n")) {
		t.Errorf("--json file: %+v", f)
	}
}
