package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	nt "github.com/agentsandbox/agentsandbox/internal/nartest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/record"
)

// forgedRerunWorkflow places input data at a, and step s2 needs s1's
// outputs a-c and a/x: "a-c" sorts between "a" and "a/x", which kept an
// adjacent-pairs check from seeing that a/x lands inside a.
const forgedRerunWorkflow = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: forged
inputs:
  data: {source: tree, dest: a}
steps:
  - name: s1
    run: mkdir -p a-c a/x && echo c > a-c/c && echo pwned > a/x/file
    outputs: [a-c, a/x]
    resources: {timeout: 30s}
  - name: s2
    needs: [s1]
    inputs: [data]
    run: ls -la a
    resources: {timeout: 30s}
`

// TestRerunForgedRecordStaysInTheWorkspace: a record from a store received
// from elsewhere pins input data as a NAR that is one symlink to victim, and
// a workflow whose next step gets s1's output a/x beneath that input. The
// rerun fails naming the collision, and nothing is written outside the
// workspace (before, the host wrote victim/x as root).
func TestRerunForgedRecordStaysInTheWorkspace(t *testing.T) {
	testtier.Root(t)
	victim := t.TempDir()
	state := t.TempDir()
	s, err := record.OpenStore(state)
	if err != nil {
		t.Fatal(err)
	}
	wf, _, err := s.PutBlob(strings.NewReader(forgedRerunWorkflow))
	if err != nil {
		t.Fatal(err)
	}
	link, _, err := s.PutBlob(bytes.NewReader(nt.Symlink(victim).Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Put(&record.Record{Version: record.Version,
		Workflow: record.Workflow{Name: "forged", FileDigest: wf},
		Inputs:   []record.Input{{Name: "data", Kind: "file", Source: "tree", Format: record.FormatNAR, Digest: link}},
	})
	if err != nil {
		t.Fatal(err)
	}
	unpinned := filepath.Join(t.TempDir(), "unpinned.yaml")
	if err := os.WriteFile(unpinned, []byte("agentsandbox:\n  require_pinned_inputs: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := execute(t, "rerun", "--isolation", "namespace", "--state-dir", state, "--policy-data", unpinned, id.String())
	if code == ExitOK || !strings.Contains(stderr, `input "data" and output "a/x" of step "s1" both land at "a/x"`) {
		t.Errorf("rerun of the forged record: exit %d, want a refusal naming the collision\n%s\n%s", code, out, stderr)
	}
	if entries, _ := os.ReadDir(victim); len(entries) != 0 {
		t.Fatalf("the rerun wrote outside the workspace: %v", entries)
	}
}
