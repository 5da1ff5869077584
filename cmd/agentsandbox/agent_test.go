package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/vmrunner/jail"
)

// TestApplyAgentMissingOrMismatched: apply without a usable sandbox agent
// fails with exit 5 and an error that names the path it tried and how to
// fix it.
func TestApplyAgentMissingOrMismatched(t *testing.T) {
	testtier.Root(t)
	dir := t.TempDir()
	mismatched := filepath.Join(dir, "old", jail.AgentName)
	if err := os.MkdirAll(filepath.Dir(mismatched), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mismatched, []byte("#!/bin/sh\necho '{\"hello\":{\"protocol\":999,\"job\":1}}' >&4\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, agent, want string }{
		{"missing", filepath.Join(dir, "nowhere", jail.AgentName), "no such file"},
		{"mismatched", mismatched, "jail protocol 999"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(jail.AgentEnv, c.agent)
			code, out, stderr := execute(t, "apply", "--isolation", "namespace", "--state-dir", filepath.Join(dir, c.name), "../../examples/hello.yaml")
			if code != ExitInfra {
				t.Errorf("apply: exit %d, want %d\n%s\n%s", code, ExitInfra, out, stderr)
			}
			for _, s := range []string{"sandbox agent " + c.agent, c.want, "make build", jail.AgentEnv} {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr)
				}
			}
		})
	}
}

// TestApplyFindsAgentBesideIt: a built CLI with agentsandbox-guest in its
// own directory (what `make build` leaves in bin/) runs a step with it and
// no AGENTSANDBOX_AGENT.
func TestApplyFindsAgentBesideIt(t *testing.T) {
	testtier.Root(t)
	dir := t.TempDir()
	bin := buildCLI(t, dir)
	if _, err := testtier.BuildAgent(dir); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "apply", "--isolation", "namespace", "--state-dir", filepath.Join(dir, "state"), "../../examples/hello.yaml")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, jail.AgentEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hello  succeeded") {
		t.Fatalf("apply with the agent beside the CLI: %v\n%s", err, out)
	}
}
