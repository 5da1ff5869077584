package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// forbiddenTrees are import paths the agent must not link, with every
// package under them: the jail parent's seccomp compiler's imports, and ELF
// reading with its decompressors. The agent is started for every step, and
// every package it links has its init run and its pages mapped before the
// jail's init can take over (see vmrunner/jail/jailinit).
var forbiddenTrees = []string{
	"github.com/elastic/go-seccomp-bpf",
	"github.com/moby/profiles",
	"github.com/opencontainers/runtime-spec",
	"debug/elf",
	"compress",
}

// forbiddenPackages are packages the agent must not link, though packages
// under them are fine: the jail's parent side and the seccomp compiler
// (vmrunner/jail/jailinit, jailwire and vmrunner/seccomp/compiled are what
// the init needs of them).
var forbiddenPackages = []string{
	"github.com/agentsandbox/agentsandbox/vmrunner/jail",
	"github.com/agentsandbox/agentsandbox/vmrunner/seccomp",
}

func forbidden(path string) bool {
	for _, f := range forbiddenTrees {
		if path == f || strings.HasPrefix(path, f+"/") {
			return true
		}
	}
	return slices.Contains(forbiddenPackages, path)
}

// TestAgentDeps fails when the agent links any of forbiddenDeps again,
// naming the packages that import it.
func TestAgentDeps(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command in PATH")
	}
	cmd := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}:{{join .Imports " "}}`, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, stderrOf(err))
	}
	importers := map[string][]string{}
	var deps []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		path, imports, _ := strings.Cut(line, ":")
		deps = append(deps, path)
		for _, imp := range strings.Fields(imports) {
			importers[imp] = append(importers[imp], path)
		}
	}
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed only %q", deps)
	}
	for _, d := range deps {
		if forbidden(d) {
			t.Errorf("the agent links %s, imported by %s; the jail's init must not pull in the parent's side (see vmrunner/jail/jailinit)",
				d, strings.Join(importers[d], ", "))
		}
	}
}

func TestForbidden(t *testing.T) {
	for path, want := range map[string]bool{
		"github.com/elastic/go-seccomp-bpf/arch":                         true,
		"github.com/agentsandbox/agentsandbox/vmrunner/seccomp":          true,
		"github.com/agentsandbox/agentsandbox/vmrunner/seccomp/compiled": false,
		"github.com/agentsandbox/agentsandbox/vmrunner/jail":             true,
		"github.com/agentsandbox/agentsandbox/vmrunner/jail/jailinit":    false,
		"compress/flate": true,
		"debug/elf":      true,
		"debug/dwarf":    false,
		"encoding/json":  false,
	} {
		if got := forbidden(path); got != want {
			t.Errorf("forbidden(%q) = %v, want %v", path, got, want)
		}
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
