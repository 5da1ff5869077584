package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/nixgen"
	"github.com/agentsandbox/agentsandbox/workflow"
)

func TestRenderWritesByteIdenticalFiles(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	stdio := Stdio{In: strings.NewReader(""), Out: &stdout, Err: &stderr}
	if code := Execute(context.Background(), stdio, []string{"render", "../../examples/ml-experiment.yaml", "-o", out}); code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	first := readTree(t, out)
	w, _, err := workflow.ParseFile("../../examples/ml-experiment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	groups, err := nixgen.Environments(w)
	if err != nil {
		t.Fatal(err)
	}
	wants := []string{"flake.nix", "tcg.nix"}
	for _, g := range groups {
		wants = append(wants, "envs/"+g.Hash.Name()+".nix")
	}
	for _, want := range wants {
		if _, ok := first[want]; !ok {
			t.Errorf("render did not write %s (wrote %v)", want, keys(first))
		}
	}
	if !strings.Contains(stdout.String(), filepath.Join(out, "flake.nix")) {
		t.Errorf("stdout does not list the files: %q", stdout.String())
	}
	if err := runRender(context.Background(), stdio, renderOptions{out: out}, []string{"../../examples/ml-experiment.yaml"}); err != nil {
		t.Fatal(err)
	}
	second := readTree(t, out)
	for p, b := range first {
		if !bytes.Equal(b, second[p]) {
			t.Errorf("%s changed on a rerun", p)
		}
	}
}

func TestRenderExitStatuses(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: x\nsteps: nope\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"render", bad, "-o", dir}, ExitInvalid},
		{[]string{"render", filepath.Join(dir, "missing.yaml"), "-o", dir}, ExitInvalid},
		{[]string{"render", "../../examples/ml-experiment.yaml"}, ExitInvalid},
		{[]string{"render"}, ExitInvalid},
	} {
		var stderr bytes.Buffer
		code := Execute(context.Background(), Stdio{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &stderr}, c.args)
		if code != c.want {
			t.Errorf("%v: exit %d, want %d (%s)", c.args, code, c.want, stderr.String())
		}
	}
}

func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		m[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func keys(m map[string][]byte) []string {
	var k []string
	for p := range m {
		k = append(k, p)
	}
	return k
}
