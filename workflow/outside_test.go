package workflow

import (
	"strings"
	"testing"
)

// A file input may leave the workflow's directory only when the caller
// allows it (apply --allow-outside-inputs); testdata/bad/outside.yaml has
// the refusals with their positions.
func TestAllowOutsideInputs(t *testing.T) {
	src := `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: outside
inputs:
  notes:
    source: ../shared/notes.txt
steps:
  - name: a
    run: "true"
    inputs: [notes]
`
	_, err := Parse("wf.yaml", []byte(src))
	if err == nil || !strings.Contains(err.Error(), `wf.yaml:6:13: input "notes" source "../shared/notes.txt" leaves the workflow's directory`) {
		t.Fatalf("Parse: %v, want the source refused at its position", err)
	}
	w, err := Parse("wf.yaml", []byte(src), AllowOutsideInputs(true))
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Inputs[0].Source; got != "../shared/notes.txt" {
		t.Errorf("source %q", got)
	}
}
