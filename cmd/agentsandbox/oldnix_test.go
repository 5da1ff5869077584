package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// fakeOldNix puts a nix on PATH that says it is Debian 12's 2.8.0 and
// logs every command line it gets; it returns the log.
func fakeOldNix(t *testing.T) (log string) {
	t.Helper()
	dir := t.TempDir()
	log = filepath.Join(dir, "calls")
	script := "#!/bin/sh\necho \"$*\" >> " + log + "\n" +
		"if [ \"$1\" = --version ]; then echo 'nix (Nix) 2.8.0'; exit 0; fi\n" +
		"echo 'error: this old nix was asked to evaluate' >&2; exit 1\n"
	for _, name := range []string{"nix", "nix-instantiate", "nix-store"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	return log
}

const pinnedPackages = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: old-nix
nixpkgs: github:NixOS/nixpkgs/8fd9daa3db09ced9700431c5b7ad0e8ba199b575
steps:
  - name: count
    isolation: namespace
    packages: [jq]
    run: jq --version
`

// TestApplyRefusesOldNix: on a host whose Nix is older than the pinned
// nixpkgs needs, apply refuses before Nix evaluates anything, naming the
// Nix found, the version needed and how to get one; validate warns.
func TestApplyRefusesOldNix(t *testing.T) {
	testtier.Root(t)
	log := fakeOldNix(t)
	dir := t.TempDir()
	wf := filepath.Join(dir, "old-nix.yaml")
	if err := os.WriteFile(wf, []byte(pinnedPackages), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := execute(t, "apply", "--state-dir", filepath.Join(dir, "state"), wf)
	if code != ExitInfra {
		t.Fatalf("apply with Nix 2.8: exit %d, want %d\n%s\n%s", code, ExitInfra, out, stderr)
	}
	for _, want := range []string{"nix (Nix) 2.8.0 at " + filepath.Dir(log) + "/nix is too old for this workflow, which needs Nix 2.18 or later",
		"nixpkgs since 2025-08", "scripts/install-nix.sh"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("apply's error lacks %q:\n%s", want, stderr)
		}
	}
	calls, _ := os.ReadFile(log)
	for _, c := range strings.Split(strings.TrimSpace(string(calls)), "\n") {
		if c != "--version" {
			t.Errorf("the old Nix was run as 'nix %s': apply must refuse before evaluating", c)
		}
	}

	code, out, stderr = execute(t, "validate", wf)
	if code != ExitOK || !strings.Contains(stderr, wf+": warning: nix (Nix) 2.8.0") || !strings.Contains(out, wf+": ok") {
		t.Errorf("validate with Nix 2.8: exit %d, want 0 and a warning\n%s\n%s", code, out, stderr)
	}
}
