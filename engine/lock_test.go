package engine

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/fakebackend"
	"github.com/agentsandbox/agentsandbox/workflow"
)

const packagesYAML = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: with-packages
nixpkgs: github:NixOS/nixpkgs/0123456789abcdef0123456789abcdef01234567
steps:
  - name: a
    isolation: namespace
    packages: [hello]
    run: hello
  - name: b
    isolation: namespace
    packages: [hello]
    run: hello
`

// TestRunPinsFlakeLock: the flake.lock the closures were built with is a
// blob the record names (workflow.lock), once for the run, and verify
// checks it; a run Nix did not realise names none.
func TestRunPinsFlakeLock(t *testing.T) {
	lock := []byte(`{"nodes":{"root":{}},"root":"root","version":7}` + "\n")
	f := newFixture(t, packagesYAML)
	o := f.options(t, fakebackend.New(), nil)
	o.Host.Nix = true // the realiser below plays Nix
	o.Realise = func(_ context.Context, steps []workflow.Step) (map[string]Realised, error) {
		out := map[string]Realised{}
		for _, s := range steps {
			out[s.Name] = Realised{EnvPath: "/nix/store/00000000000000000000000000000000-env", Lock: lock}
		}
		return out, nil
	}
	res, err := Run(context.Background(), f.w, o)
	if err != nil {
		t.Fatal(err)
	}
	d := res.Record.Workflow.Lock
	if d == nil {
		t.Fatal("the record names no flake lock")
	}
	rc, err := f.store.OpenBlob(*d)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, lock) {
		t.Errorf("lock blob %q, want %q", got, lock)
	}
	if problems, err := f.store.Verify(res.ID); err != nil || len(problems) > 0 {
		t.Errorf("verify: %v %v", problems, err)
	}

	plain := newFixture(t, pipelineYAML)
	res, err = Run(context.Background(), plain.w, plain.options(t, fakebackend.New(), nil))
	if err != nil {
		t.Fatal(err)
	}
	if res.Record.Workflow.Lock != nil {
		t.Errorf("a run without Nix names a lock: %v", res.Record.Workflow.Lock)
	}
}
