package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// outsideWorkflow is a workflow in dir/wf whose input "secret" reads
// source, pinned to the sha256 of content.
func outsideWorkflow(t *testing.T, dir, source string, content []byte) string {
	t.Helper()
	sum := sha256.Sum256(content)
	wf := `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: outside
inputs:
  secret:
    source: ` + source + `
    sha256: "` + hex.EncodeToString(sum[:]) + `"
steps:
  - name: leak
    inputs: [secret]
    run: cat secret
    resources: {timeout: 30s}
`
	if err := os.MkdirAll(filepath.Join(dir, "wf"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "wf", "wf.yaml")
	if err := os.WriteFile(p, []byte(wf), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestValidateRefusesOutsideInput: validate reports a file input that
// leaves the workflow's directory at its position, unless allowed.
func TestValidateRefusesOutsideInput(t *testing.T) {
	dir := t.TempDir()
	p := outsideWorkflow(t, dir, "../../root/x", []byte("x"))
	code, _, stderr := execute(t, "validate", p)
	if code != ExitInvalid {
		t.Fatalf("validate: exit %d, want %d\n%s", code, ExitInvalid, stderr)
	}
	if want := p + `:6:13: input "secret" source "../../root/x" leaves the workflow's directory`; !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
	if code, _, stderr := execute(t, "validate", "--allow-outside-inputs", p); code != ExitOK {
		t.Errorf("validate --allow-outside-inputs: exit %d\n%s", code, stderr)
	}
}

// TestApplyRefusesOutsideInput: apply does not read a file input that
// leaves the workflow's directory through a symlink (which validate cannot
// see), even with its sha256 pinned; --allow-outside-inputs reads one.
func TestApplyRefusesOutsideInput(t *testing.T) {
	testtier.Root(t)
	dir := t.TempDir()
	secret := []byte("canary-outside-" + filepath.Base(dir) + "\n")
	if err := os.WriteFile(filepath.Join(dir, "secret.txt"), secret, 0o600); err != nil {
		t.Fatal(err)
	}
	p := outsideWorkflow(t, dir, "host"+filepath.Join(dir, "secret.txt"), secret)
	if err := os.Symlink("/", filepath.Join(dir, "wf", "host")); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	code, out, stderr := execute(t, "apply", "--isolation", "namespace", "--state-dir", state, p)
	if code != ExitInvalid {
		t.Fatalf("apply: exit %d, want %d\n%s\n%s", code, ExitInvalid, out, stderr)
	}
	if strings.Contains(out+stderr, string(secret)) {
		t.Fatalf("the job read the file outside:\n%s\n%s", out, stderr)
	}
	if !strings.Contains(stderr, "leads out of it through a symlink") || !strings.Contains(stderr, "--allow-outside-inputs") {
		t.Errorf("the refusal does not say why or how to allow it:\n%s", stderr)
	}

	allowed := outsideWorkflow(t, dir, "../secret.txt", secret)
	code, out, stderr = execute(t, "apply", "--isolation", "namespace", "--state-dir", state, "--allow-outside-inputs", allowed)
	if code != ExitOK {
		t.Fatalf("apply --allow-outside-inputs: exit %d\n%s\n%s", code, out, stderr)
	}
	if !strings.Contains(stderr, "[leak] "+strings.TrimSpace(string(secret))) {
		t.Errorf("the allowed input did not reach the job:\n%s", stderr)
	}
}
