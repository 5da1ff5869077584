package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	mcpserver "github.com/agentsandbox/agentsandbox/server/mcp"
)

// TestMCPStdio: serveMCP speaks MCP on the command's stdio, and stops the
// manager's sandboxes when the client hangs up.
func TestMCPStdio(t *testing.T) {
	fake := managertest.New(t, sandboxes.Options{})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- serveMCP(context.Background(), Stdio{In: inR, Out: outW, Err: &stderr}, mcpserver.New(fake, "test", mcpserver.Options{}), fake)
		outW.Close()
	}()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "0"}, nil).Connect(context.Background(),
		&sdk.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "sandbox_create"})
	if err != nil || res.IsError {
		t.Fatalf("sandbox_create over stdio: %v %v", res, err)
	}
	cs.Close()
	if err := <-done; err != nil {
		t.Errorf("serveMCP after the client hung up: %v", err)
	}
	if fake.Closed() != 1 {
		t.Errorf("the manager was closed %d times, want once", fake.Closed())
	}
	if !strings.Contains(stderr.String(), "serving MCP on stdio") {
		t.Errorf("stderr %q", stderr.String())
	}
}

// TestMCPStdioAnswersAtEOF: requests written all at once and then stdin
// closed (printf INIT INITIALIZED TOOLS_LIST CALL | agentsandbox mcp) are
// every one answered before the command ends.
func TestMCPStdioAnswersAtEOF(t *testing.T) {
	fake := managertest.New(t, sandboxes.Options{})
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sandbox_create","arguments":{}}}`,
	}, "\n") + "\n"
	var out, stderr bytes.Buffer
	err := serveMCP(context.Background(), Stdio{In: strings.NewReader(in), Out: &out, Err: &stderr}, mcpserver.New(fake, "test", mcpserver.Options{}), fake)
	if err != nil {
		t.Fatalf("serveMCP: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{`"id":1,"result"`, `"id":2,"result"`, `"id":3,"result"`, `"sandbox_create"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("answers lack %s:\n%s", want, out.String())
		}
	}
}

func TestMCPHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Execute(context.Background(), Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}, []string{"mcp", "--help"}); code != ExitOK {
		t.Fatalf("mcp --help: exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"standard input", "root", "--state-dir", "--templates", "--max-sandboxes", "/mcp"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("mcp --help does not mention %s", want)
		}
	}
}

// TestMCPRoot runs `agentsandbox mcp` as an MCP client would (a command
// on stdio) with the real manager: a namespace sandbox, a file written and
// read, commands (a failing one is a result), and kill's record id read
// back as a resource.
func TestMCPRoot(t *testing.T) {
	testtier.Root(t)
	dir := t.TempDir()
	bin := buildCLI(t, dir)
	cmd := exec.Command(bin, "mcp", "--state-dir", filepath.Join(dir, "state"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	ctx := context.Background()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "0"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to agentsandbox mcp: %v\nstderr:\n%s", err, stderr.String())
	}
	defer func() {
		cs.Close()
		if t.Failed() {
			t.Logf("agentsandbox mcp's stderr:\n%s", stderr.String())
		}
	}()
	call := func(name string, args map[string]any) map[string]any {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var text string
		for _, c := range res.Content {
			if tc, ok := c.(*sdk.TextContent); ok {
				text += tc.Text
			}
		}
		if res.IsError {
			t.Fatalf("%s: %s", name, text)
		}
		var out map[string]any
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, &out)
		return out
	}
	sb := call("sandbox_create", map[string]any{"labels": map[string]string{"test": "mcp"}})
	id, _ := sb["id"].(string)
	call("write_file", map[string]any{"sandbox_id": id, "path": "in.txt", "content": "inside\n"})
	x := call("exec", map[string]any{"sandbox_id": id, "shell": "cat in.txt; id -u; exit 7"})
	if x["exit_code"] != 7.0 || !strings.HasPrefix(x["stdout"].(string), "inside\n") {
		t.Errorf("exec: %v", x)
	}
	f := call("read_file", map[string]any{"sandbox_id": id, "path": "in.txt"})
	if f["content"] != "inside\n" {
		t.Errorf("read_file: %v", f)
	}
	k := call("kill", map[string]any{"sandbox_id": id})
	rec, _ := k["record"].(string)
	if rec == "" {
		t.Fatalf("kill: %v, want a record id", k)
	}
	res, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: mcpserver.RecordURIPrefix + rec})
	if err != nil {
		t.Fatalf("read the record %s: %v", rec, err)
	}
	if body := res.Contents[0].Text; !strings.Contains(body, "in.txt") || !strings.Contains(body, `"exec"`) {
		t.Errorf("the record does not show the file write and the command: %.500s", body)
	}
}

// TestMCPServeRoot: `agentsandbox serve` answers MCP at /mcp on its unix
// socket (whose permissions are the authentication), with the real
// manager.
func TestMCPServeRoot(t *testing.T) {
	testtier.Root(t)
	dir := t.TempDir()
	bin := buildCLI(t, dir)
	state := filepath.Join(dir, "state")
	s := startApply(t, bin, "serve", "--state-dir", state)
	s.waitFor(t, "serving on unix socket", time.Minute)
	// SIGTERM, not the cleanup's SIGKILL: the server stops its sandboxes
	// and unmounts their workspaces before the temporary directory goes.
	defer func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		s.wait()
	}()
	ctx := context.Background()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "0"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: "http://sandbox/mcp", HTTPClient: unixClient(filepath.Join(state, socketName)), MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect to serve's /mcp: %v", err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "sandbox_create"})
	if err != nil || res.IsError {
		t.Fatalf("sandbox_create: %v %v", res, err)
	}
	id, _ := res.StructuredContent.(map[string]any)["id"].(string)
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "exec", Arguments: map[string]any{"sandbox_id": id, "argv": []string{"echo", "via", "serve"}}})
	if err != nil || res.IsError {
		t.Fatalf("exec: %v %v", res, err)
	}
	if out := res.StructuredContent.(map[string]any)["stdout"]; out != "via serve\n" {
		t.Errorf("exec's stdout %q", out)
	}
	// The REST API sees the sandbox MCP created: one manager.
	resp, err := unixClient(filepath.Join(state, socketName)).Get("http://sandbox/v1/sandboxes/" + id)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /v1/sandboxes/%s: %d", id, resp.StatusCode)
	}
}
