package mcp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// needNode returns the paths of node and npm, or skips the test; in CI
// (CI=true) their absence fails it.
func needNode(t *testing.T) (node, npm string) {
	t.Helper()
	node, errNode := exec.LookPath("node")
	npm, errNpm := exec.LookPath("npm")
	if errNode == nil && errNpm == nil {
		return node, npm
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("node or npm is missing: install nodejs and npm (scripts/setup.sh does)")
	}
	t.Skip("node or npm is missing: install nodejs and npm (scripts/setup.sh does) to run the TypeScript client test")
	return "", ""
}

// TestMCPTypeScriptClient runs the official TypeScript SDK (the exact
// version pinned in testdata/ts-client/package-lock.json, installed with
// npm ci) against the MCP server over streamable HTTP behind the REST
// server's bearer token.
func TestMCPTypeScriptClient(t *testing.T) {
	if testing.Short() {
		t.Skip("installs the TypeScript SDK with npm ci")
	}
	node, npm := needNode(t)
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "client.mjs"} {
		b, err := os.ReadFile(filepath.Join("testdata", "ts-client", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s\n(the npm registry must be reachable, or its packages in npm's cache)", dir, err, out)
	}

	hs := serveHTTP(t)
	var stdout, stderr bytes.Buffer
	run := exec.CommandContext(ctx, node, "client.mjs", hs.URL+"/mcp")
	run.Dir = dir
	run.Env = append(os.Environ(), "AGENTSANDBOX_TOKEN="+testToken)
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Run(); err != nil {
		t.Fatalf("node client.mjs: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}

	type line struct {
		Tools      []string       `json:"tools"`
		Tool       string         `json:"tool"`
		IsError    bool           `json:"isError"`
		Structured map[string]any `json:"structured"`
		Text       string         `json:"text"`
	}
	var lines []line
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("client output line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	if len(lines) != 8 {
		t.Fatalf("client printed %d lines, want 8:\n%s\nstderr:\n%s", len(lines), stdout.String(), stderr.String())
	}
	for _, want := range []string{"sandbox_create", "exec", "write_file", "read_file", "kill"} {
		if !slices.Contains(lines[0].Tools, want) {
			t.Errorf("tools/list %v lacks %s", lines[0].Tools, want)
		}
	}
	create, write, run1, read, traversal, kill, unknown := lines[1], lines[2], lines[3], lines[4], lines[5], lines[6], lines[7]
	id, _ := create.Structured["id"].(string)
	if create.IsError || id == "" || create.Structured["state"] != "running" {
		t.Errorf("sandbox_create: %+v", create)
	}
	if write.IsError || write.Structured["path"] != "notes/hello.txt" {
		t.Errorf("write_file: %+v", write)
	}
	if run1.IsError || run1.Structured["exit_code"] != 4.0 || run1.Structured["stdout"] != "HELLO FROM TYPESCRIPT\n" || !strings.HasPrefix(run1.Text, "exit code 4") {
		t.Errorf("exec: a non-zero exit is a result with the output: %+v", run1)
	}
	if read.IsError || read.Structured["content"] != "hello from typescript\n" {
		t.Errorf("read_file: %+v", read)
	}
	if !traversal.IsError || !strings.HasPrefix(traversal.Text, "bad_request: ") || traversal.Structured != nil {
		t.Errorf("read_file ../outside: %+v, want a bad_request tool error", traversal)
	}
	if kill.IsError || kill.Structured["state"] != "stopped" || kill.Structured["record"] == "" || kill.Structured["record"] == nil {
		t.Errorf("kill: %+v, want stopped with the record id", kill)
	}
	if !unknown.IsError || !strings.HasPrefix(unknown.Text, "not_found: ") {
		t.Errorf("exec in an unknown sandbox: %+v, want a not_found tool error", unknown)
	}
}
