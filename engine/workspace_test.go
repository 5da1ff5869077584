package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/fsx/jobfs"
	"github.com/agentsandbox/agentsandbox/internal/fakebackend"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// exportTo exports record id's outputs into the host directory dir.
func exportTo(t *testing.T, store *record.Store, id record.ID, dir string) {
	t.Helper()
	dst, err := jobfs.OpenRestorer(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if _, err := store.Export(id, dst); err != nil {
		t.Fatal(err)
	}
}

// A placement nested inside another is refused even when a path that
// sorts between them ("data-c" between "data" and "data/x") keeps them
// apart in the sorted list.
func TestPlacementsCollideAcrossASortedNeighbour(t *testing.T) {
	steps := map[string]workflow.Step{
		"a": {Name: "a", Outputs: []string{"data"}},
		"b": {Name: "b", Outputs: []string{"data-c", "data/x/file"}},
	}
	s := workflow.Step{Name: "c", Needs: []string{"a", "b"}}
	_, err := placements(s, nil, nil, steps, nil)
	if err == nil || !strings.Contains(err.Error(), `output "data" of step "a" and output "data/x/file" of step "b" both land at "data/x/file"`) {
		t.Fatalf("err = %v", err)
	}
	inputs := map[string]workflow.Input{"in": {Name: "in", Dest: "data"}}
	s = workflow.Step{Name: "c", Inputs: []string{"in"}, Needs: []string{"b"}}
	if _, err := placements(s, map[string]string{"in": "/x"}, inputs, steps, nil); err == nil || !strings.Contains(err.Error(), `input "in" and output "data/x/file" of step "b"`) {
		t.Fatalf("an input's dest around a needed output: err = %v", err)
	}
}

// TestNeededOutputsCannotEscapeTheWorkspace: a job leaves a symlink out of
// the workspace in its output; a later step needs that output and another
// step's output that lands beneath the symlink. The host never writes
// through it: the run fails naming the collision, and nothing appears
// outside.
func TestNeededOutputsCannotEscapeTheWorkspace(t *testing.T) {
	outside := t.TempDir()
	f := newFixture(t, `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: escape
steps:
  - name: plant
    run: mkdir data && ln -s `+outside+` data/x
    outputs: [data]
    resources: {timeout: 30s}
  - name: payload
    run: mkdir -p data-c data/x && echo pwned > data/x/file && echo c > data-c/c
    outputs: [data-c, data/x/file]
    resources: {timeout: 30s}
  - name: use
    needs: [plant, payload]
    run: ls -l data
    resources: {timeout: 30s}
`)
	_, err := Run(context.Background(), f.w, f.options(t, fakebackend.New(), nil))
	if err == nil || !strings.Contains(err.Error(), `output "data" of step "plant" and output "data/x/file" of step "payload" both land at`) {
		t.Errorf("run: %v, want step use refused for colliding placements", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("the run wrote outside the workspace: %v", entries)
	}
}

// TestAssembleNeverWritesThroughASymlink: even with placements that nest
// (the check in placements bypassed), assemble does not write through a
// symlink the first placement brought, whether a needed output's NAR or a
// copied input holds it.
func TestAssembleNeverWritesThroughASymlink(t *testing.T) {
	store, err := record.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	src := t.TempDir()
	if err := os.Mkdir(filepath.Join(src, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(src, "data", "x")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "file"), []byte("pwned\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	withLink, _, err := store.PutNAR(filepath.Join(src, "data"))
	if err != nil {
		t.Fatal(err)
	}
	file, _, err := store.PutNAR(filepath.Join(src, "file"))
	if err != nil {
		t.Fatal(err)
	}
	for name, ps := range map[string][]placement{
		"needed outputs": {
			{To: "data", What: "output a", Digest: withLink.Blob()},
			{To: "data/x/file", What: "output b", Digest: file.Blob()},
		},
		"an input, then a needed output": {
			{From: filepath.Join(src, "data"), To: "data", What: "input a"},
			{To: "data/x/file", What: "output b", Digest: file.Blob()},
		},
		"a needed output, then an input": {
			{To: "data", What: "output a", Digest: withLink.Blob()},
			{From: filepath.Join(src, "file"), To: "data/x/file", What: "input b"},
		},
		"an input that is a symlink, then one beneath it": {
			{From: filepath.Join(src, "data", "x"), To: "data", What: "input a"},
			{From: filepath.Join(src, "file"), To: "data/file", What: "input b"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			ws := t.TempDir()
			err := assemble(store, ws, ps, os.Getuid(), os.Getgid())
			if !errors.Is(err, jobfs.ErrSymlink) {
				t.Errorf("assemble: %v, want a symlink error", err)
			}
			if entries, _ := os.ReadDir(outside); len(entries) != 0 {
				t.Fatalf("assemble wrote outside the workspace: %v", entries)
			}
			if target, err := os.Readlink(filepath.Join(ws, "data", "x")); err == nil && target != outside {
				t.Errorf("the restored symlink points to %q", target)
			}
		})
	}
}
