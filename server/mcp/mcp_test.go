package mcp_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server/mcp"
)

// connect serves an MCP server over the real manager on the fake backend
// in memory and returns a client session on it.
func connect(t *testing.T, o mcp.Options) (*sdk.ClientSession, *managertest.Manager) {
	t.Helper()
	return connectWith(t, o, sandboxes.Options{})
}

// connectWith is connect with the manager's options.
func connectWith(t *testing.T, o mcp.Options, mo sandboxes.Options) (*sdk.ClientSession, *managertest.Manager) {
	t.Helper()
	fake := managertest.New(t, mo)
	srv := mcp.New(fake, "test", o)
	st, ct := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
		fake.Close(context.Background())
	})
	return cs, fake
}

// call calls a tool that must succeed and decodes its structured result.
func call[Out any](t *testing.T, cs *sdk.ClientSession, name string, args any) (Out, *sdk.CallToolResult) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s: tool error: %s", name, text(res))
	}
	var out Out
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: structured content %s: %v", name, b, err)
	}
	return out, res
}

// callErr calls a tool that must fail with code.
func callErr(t *testing.T, cs *sdk.ClientSession, name string, args any, code sandboxes.Code) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: want a tool error, got a protocol error: %v", name, err)
	}
	if !res.IsError {
		t.Fatalf("%s(%v): succeeded, want error %s: %s", name, args, code, text(res))
	}
	if res.StructuredContent != nil {
		t.Errorf("%s: an error result has structured content %v", name, res.StructuredContent)
	}
	if got := text(res); !strings.HasPrefix(got, string(code)+": ") {
		t.Errorf("%s(%v): error text %q, want it to start with %q", name, args, got, code+": ")
	}
	b, _ := json.Marshal(res.Meta[mcp.ErrorMetaKey])
	var d mcp.ErrorDetails
	if err := json.Unmarshal(b, &d); err != nil || d.Code != code || d.Message == "" {
		t.Errorf("%s: _meta %s: %s, want code %s and a message", name, mcp.ErrorMetaKey, b, code)
	}
	return text(res)
}

func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestMCPListTools(t *testing.T) {
	cs, _ := connect(t, mcp.Options{})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" || tool.InputSchema == nil || tool.OutputSchema == nil {
			t.Errorf("tool %s lacks a description or a schema", tool.Name)
		}
		// Every argument is described for the model.
		b, _ := json.Marshal(tool.InputSchema)
		var schema struct {
			Properties map[string]struct {
				Description string `json:"description"`
			} `json:"properties"`
		}
		json.Unmarshal(b, &schema)
		for arg, p := range schema.Properties {
			if p.Description == "" {
				t.Errorf("tool %s: argument %s has no description", tool.Name, arg)
			}
		}
	}
	slices.Sort(names)
	want := []string{"exec", "exec_output", "kill", "list_files", "list_sandboxes", "list_snapshots", "read_file", "restore", "sandbox_create", "snapshot", "write_file"}
	if !slices.Equal(names, want) {
		t.Errorf("tools %v, want %v (run_workflow only where the manager runs workflows)", names, want)
	}
}

func TestMCPSandboxLifecycle(t *testing.T) {
	cs, _ := connect(t, mcp.Options{})
	sb, _ := call[mcp.Sandbox](t, cs, "sandbox_create", map[string]any{
		"env": map[string]string{"GREETING": "hello"}, "labels": map[string]string{"task": "demo"},
		"ttl": "30m", "idle_timeout": "5m", "isolation": "namespace"})
	if sb.ID == "" || sb.State != "running" || sb.IdleTimeout != "5m0s" || sb.Labels["task"] != "demo" {
		t.Fatalf("created %+v", sb)
	}

	x, res := call[mcp.ExecResult](t, cs, "exec", map[string]any{"sandbox_id": sb.ID, "shell": `echo "$GREETING $X"; echo oops >&2; exit 3`, "env": map[string]string{"X": "world"}})
	if x.ExitCode != 3 || x.Stdout != "hello world\n" || x.Stderr != "oops\n" || x.TimedOut || x.Truncated || x.ExecID == "" {
		t.Errorf("exec: %+v", x)
	}
	if got := text(res); !strings.HasPrefix(got, "exit code 3 ") || !strings.Contains(got, "hello world") {
		t.Errorf("exec text %q", got)
	}

	x, _ = call[mcp.ExecResult](t, cs, "exec", map[string]any{"sandbox_id": sb.ID, "argv": []string{"cat"}, "stdin": "from stdin"})
	if x.ExitCode != 0 || x.Stdout != "from stdin" {
		t.Errorf("exec with stdin: %+v", x)
	}
	x, res = call[mcp.ExecResult](t, cs, "exec", map[string]any{"sandbox_id": sb.ID, "argv": []string{"sleep", "10"}, "timeout": "100ms"})
	if !x.TimedOut || x.Signal == "" {
		t.Errorf("exec with a timeout: %+v", x)
	}
	if !strings.HasPrefix(text(res), "timed out") {
		t.Errorf("exec with a timeout: text %q", text(res))
	}
	x, _ = call[mcp.ExecResult](t, cs, "exec", map[string]any{"sandbox_id": sb.ID, "argv": []string{"/no/such/program"}})
	if x.Error == "" {
		t.Errorf("exec of a missing program: %+v, want its error", x)
	}

	// Files: text, binary, a mode, the listing, the command seeing them.
	f, _ := call[mcp.File](t, cs, "write_file", map[string]any{"sandbox_id": sb.ID, "path": "src/run.sh", "content": "#!/bin/sh\necho ran\n", "mode": "0755"})
	if f.Path != "src/run.sh" || f.Size != 19 || f.SHA256 == "" {
		t.Errorf("write_file: %+v", f)
	}
	x, _ = call[mcp.ExecResult](t, cs, "exec", map[string]any{"sandbox_id": sb.ID, "argv": []string{"./run.sh"}, "cwd": "src"})
	if x.Stdout != "ran\n" {
		t.Errorf("exec of the written script in cwd src: %+v", x)
	}
	bin := []byte{0, 1, 0xff, 0xfe, 'x'}
	call[mcp.File](t, cs, "write_file", map[string]any{"sandbox_id": sb.ID, "path": "data.bin", "content": base64.StdEncoding.EncodeToString(bin), "base64": true})
	fc, _ := call[mcp.FileContent](t, cs, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "data.bin", "base64": true})
	if fc.Encoding != "base64" || fc.Content != base64.StdEncoding.EncodeToString(bin) {
		t.Errorf("read_file base64: %+v", fc)
	}
	callErr(t, cs, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "data.bin"}, sandboxes.CodeBadRequest)
	fc, _ = call[mcp.FileContent](t, cs, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "src/run.sh"})
	if fc.Encoding != "text" || fc.Content != "#!/bin/sh\necho ran\n" {
		t.Errorf("read_file: %+v", fc)
	}
	ls, _ := call[mcp.FileList](t, cs, "list_files", map[string]any{"sandbox_id": sb.ID})
	var paths []string
	for _, f := range ls.Files {
		paths = append(paths, f.Path+":"+f.Type)
	}
	if !slices.Contains(paths, "src:dir") || !slices.Contains(paths, "data.bin:file") {
		t.Errorf("list_files: %v", paths)
	}
	ls, _ = call[mcp.FileList](t, cs, "list_files", map[string]any{"sandbox_id": sb.ID, "path": "src"})
	if len(ls.Files) != 1 || ls.Files[0].Path != "src/run.sh" || ls.Files[0].Mode != "0755" {
		t.Errorf("list_files src: %+v", ls.Files)
	}

	list, _ := call[mcp.SandboxList](t, cs, "list_sandboxes", map[string]any{"labels": map[string]string{"task": "demo"}})
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != sb.ID {
		t.Errorf("list_sandboxes task=demo: %+v", list)
	}
	list, _ = call[mcp.SandboxList](t, cs, "list_sandboxes", map[string]any{"labels": map[string]string{"task": "other"}})
	if len(list.Sandboxes) != 0 {
		t.Errorf("list_sandboxes task=other: %+v", list)
	}
	list, _ = call[mcp.SandboxList](t, cs, "list_sandboxes", nil)
	if len(list.Sandboxes) != 1 {
		t.Errorf("list_sandboxes: %+v", list)
	}

	k, _ := call[mcp.Sandbox](t, cs, "kill", map[string]any{"sandbox_id": sb.ID})
	if k.State != "stopped" || k.Record == "" || k.Ended != "killed" {
		t.Errorf("kill: %+v, want stopped with a record", k)
	}
	callErr(t, cs, "exec", map[string]any{"sandbox_id": sb.ID, "argv": []string{"true"}}, sandboxes.CodeConflict)
}

func TestMCPErrors(t *testing.T) {
	cs, _ := connect(t, mcp.Options{MaxOutputBytes: 1024})
	ctx := context.Background()
	sb, _ := call[mcp.Sandbox](t, cs, "sandbox_create", nil)
	id := sb.ID

	msg := callErr(t, cs, "exec", map[string]any{"sandbox_id": "nope", "argv": []string{"true"}}, sandboxes.CodeNotFound)
	if !strings.Contains(msg, "nope") {
		t.Errorf("not_found error %q does not name the sandbox", msg)
	}
	for tool, args := range map[string]map[string]any{
		"read_file":   {"sandbox_id": "nope", "path": "a"},
		"list_files":  {"sandbox_id": "nope"},
		"kill":        {"sandbox_id": "nope"},
		"write_file":  {"sandbox_id": "nope", "path": "a", "content": ""},
		"exec_output": {"sandbox_id": "nope", "exec_id": "x"},
	} {
		callErr(t, cs, tool, args, sandboxes.CodeNotFound)
	}
	// Path traversal is refused, whatever the tool.
	for _, p := range []string{"../etc/passwd", "a/../../b", "/etc/passwd"} {
		callErr(t, cs, "read_file", map[string]any{"sandbox_id": id, "path": p}, sandboxes.CodeBadRequest)
		callErr(t, cs, "write_file", map[string]any{"sandbox_id": id, "path": p, "content": "x"}, sandboxes.CodeBadRequest)
		callErr(t, cs, "list_files", map[string]any{"sandbox_id": id, "path": p}, sandboxes.CodeBadRequest)
	}
	callErr(t, cs, "read_file", map[string]any{"sandbox_id": id, "path": "missing"}, sandboxes.CodeNotFound)
	callErr(t, cs, "exec", map[string]any{"sandbox_id": id}, sandboxes.CodeBadRequest)
	callErr(t, cs, "exec", map[string]any{"sandbox_id": id, "argv": []string{"true"}, "shell": "true"}, sandboxes.CodeBadRequest)
	callErr(t, cs, "exec", map[string]any{"sandbox_id": id, "argv": []string{"true"}, "timeout": "soon"}, sandboxes.CodeBadRequest)
	callErr(t, cs, "sandbox_create", map[string]any{"ttl": "forever"}, sandboxes.CodeBadRequest)
	callErr(t, cs, "write_file", map[string]any{"sandbox_id": id, "path": "x", "content": "%%%", "base64": true}, sandboxes.CodeBadRequest)
	callErr(t, cs, "write_file", map[string]any{"sandbox_id": id, "path": "x", "content": "", "mode": "rwx"}, sandboxes.CodeBadRequest)
	callErr(t, cs, "exec_output", map[string]any{"sandbox_id": id, "exec_id": "nope"}, sandboxes.CodeNotFound)

	// A missing required argument is refused by the schema.
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "a"}})
	if err != nil || !res.IsError || !strings.Contains(text(res), "sandbox_id") {
		t.Errorf("read_file without sandbox_id: %v %v", res, err)
	}

	// A file larger than the limit is too_large, with what to do.
	call[mcp.File](t, cs, "write_file", map[string]any{"sandbox_id": id, "path": "big", "content": strings.Repeat("x", 2000)})
	if msg := callErr(t, cs, "read_file", map[string]any{"sandbox_id": id, "path": "big"}, sandboxes.CodeTooLarge); !strings.Contains(msg, "exec") {
		t.Errorf("too_large error %q does not say what to do", msg)
	}
}

// TestMCPExecTruncated: long output is cut at the limit with a note, and
// exec_output reads the rest from the offsets the result gives.
func TestMCPExecTruncated(t *testing.T) {
	cs, _ := connect(t, mcp.Options{MaxOutputBytes: 1000})
	sb, _ := call[mcp.Sandbox](t, cs, "sandbox_create", nil)
	x, res := call[mcp.ExecResult](t, cs, "exec", map[string]any{"sandbox_id": sb.ID, "shell": "seq 1 1000"})
	want := ""
	for i := 1; i <= 1000; i++ {
		want += strconv.Itoa(i) + "\n"
	}
	if !x.Truncated || len(x.Stdout) != 1000 || x.StdoutNext != 1000 || x.StdoutBytes != int64(len(want)) || x.Stdout != want[:1000] {
		t.Fatalf("exec: truncated %v, %d bytes shown, next %d, total %d", x.Truncated, len(x.Stdout), x.StdoutNext, x.StdoutBytes)
	}
	if !strings.Contains(text(res), "output cut") || !strings.Contains(text(res), x.ExecID) {
		t.Errorf("exec text does not say the output was cut and how to read on: %q", text(res))
	}
	got := x.Stdout
	next := x.StdoutNext
	for range 10 {
		o, _ := call[mcp.ExecOutputResult](t, cs, "exec_output", map[string]any{"sandbox_id": sb.ID, "exec_id": x.ExecID, "stdout_offset": next})
		if o.StdoutFrom != next {
			t.Fatalf("exec_output from %d starts at %d", next, o.StdoutFrom)
		}
		got += o.Stdout
		next = o.StdoutNext
		if !o.More {
			break
		}
	}
	if got != want {
		t.Errorf("exec then exec_output read %d bytes, want %d", len(got), len(want))
	}
}

func TestMCPRecordResources(t *testing.T) {
	store, err := record.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := &record.Record{Version: 1, Workflow: record.Workflow{Name: "demo"}, Status: record.Status("succeeded"),
		Started: start, Finished: start.Add(1500 * time.Millisecond), Inputs: []record.Input{}, Steps: []record.Step{}}
	id, err := store.Put(r)
	if err != nil {
		t.Fatal(err)
	}
	cs, _ := connect(t, mcp.Options{Records: store})
	ctx := context.Background()

	tmpl, err := cs.ListResourceTemplates(ctx, nil)
	if err != nil || len(tmpl.ResourceTemplates) != 1 || tmpl.ResourceTemplates[0].URITemplate != "agentsandbox://records/{id}" {
		t.Fatalf("resource templates: %v %v", tmpl, err)
	}
	res, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "agentsandbox://records/" + id.String()})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := store.GetRaw(id)
	if len(res.Contents) != 1 || res.Contents[0].Text != string(raw) || res.Contents[0].MIMEType != "application/json" {
		t.Errorf("record resource: %+v, want the record's bytes", res.Contents)
	}
	// A unique prefix will do, and answers with the full id's URI.
	res, err = cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "agentsandbox://records/" + id.String()[:8]})
	if err != nil || res.Contents[0].URI != "agentsandbox://records/"+id.String() {
		t.Errorf("record by prefix: %v %v", res, err)
	}
	if _, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "agentsandbox://records/0000000000"}); err == nil {
		t.Error("an unknown record was read")
	}

	res, err = cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "agentsandbox://records"})
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Records []mcp.RecordSummary }
	if err := json.Unmarshal([]byte(res.Contents[0].Text), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Records) != 1 || list.Records[0].ID != id.String() || list.Records[0].Workflow != "demo" || list.Records[0].DurationMS != 1500 {
		t.Errorf("records list: %+v", list)
	}
}

// TestMCPSnapshots: snapshot, change, restore rolls back; a fork starts
// from the snapshot; unknown ids are errors with their codes.
func TestMCPSnapshots(t *testing.T) {
	cs, _ := connect(t, mcp.Options{})
	sb, _ := call[mcp.Sandbox](t, cs, "sandbox_create", nil)
	call[mcp.File](t, cs, "write_file", map[string]any{"sandbox_id": sb.ID, "path": "state.txt", "content": "good\n"})
	snap, _ := call[mcp.Snapshot](t, cs, "snapshot", map[string]any{"sandbox_id": sb.ID, "label": "good state"})
	if !strings.HasPrefix(snap.ID, "sha256:") || snap.Sandbox != sb.ID || snap.Label != "good state" {
		t.Fatalf("snapshot: %+v", snap)
	}
	call[mcp.ExecResult](t, cs, "exec", map[string]any{"sandbox_id": sb.ID, "shell": "echo bad > state.txt; touch extra"})
	call[mcp.Sandbox](t, cs, "restore", map[string]any{"sandbox_id": sb.ID, "snapshot": snap.ID})
	x, _ := call[mcp.ExecResult](t, cs, "exec", map[string]any{"sandbox_id": sb.ID, "shell": "cat state.txt; ls"})
	if x.Stdout != "good\nstate.txt\n" {
		t.Errorf("after restore: %q, want the snapshot's files only", x.Stdout)
	}
	list, _ := call[mcp.SnapshotList](t, cs, "list_snapshots", map[string]any{"sandbox_id": sb.ID})
	if len(list.Snapshots) != 1 || list.Snapshots[0].ID != snap.ID {
		t.Errorf("list_snapshots: %+v", list)
	}
	fork, _ := call[mcp.Sandbox](t, cs, "sandbox_create", map[string]any{"from_snapshot": snap.ID})
	fc, _ := call[mcp.FileContent](t, cs, "read_file", map[string]any{"sandbox_id": fork.ID, "path": "state.txt"})
	if fc.Content != "good\n" {
		t.Errorf("the fork's state.txt: %q", fc.Content)
	}

	callErr(t, cs, "snapshot", map[string]any{"sandbox_id": "nope"}, sandboxes.CodeNotFound)
	callErr(t, cs, "list_snapshots", map[string]any{"sandbox_id": "nope"}, sandboxes.CodeNotFound)
	callErr(t, cs, "restore", map[string]any{"sandbox_id": sb.ID, "snapshot": "latest"}, sandboxes.CodeBadRequest)
	callErr(t, cs, "restore", map[string]any{"sandbox_id": sb.ID, "snapshot": "sha256:" + strings.Repeat("0", 64)}, sandboxes.CodeNotFound)
}

// TestMCPExecOutputLost: bytes the server no longer has are counted in
// stdout_lost and stdout_from says where the text shown starts; they are
// never skipped silently. The manager keeps 1,000 bytes on disk; the bytes
// past them are in memory only while the command runs (and its own reader
// reads them), so once it has ended they are lost to a later reader.
func TestMCPExecOutputLost(t *testing.T) {
	cs, _ := connectWith(t, mcp.Options{MaxOutputBytes: 500}, sandboxes.Options{LogLimit: 1000})
	sb, _ := call[mcp.Sandbox](t, cs, "sandbox_create", nil)
	var want strings.Builder
	for i := 1; i <= 600000; i++ {
		want.WriteString(strconv.Itoa(i) + "\n")
	}
	x, _ := call[mcp.ExecResult](t, cs, "exec", map[string]any{"sandbox_id": sb.ID, "shell": "seq 1 600000"})
	if x.Stdout != want.String()[:500] || x.StdoutLost != 0 || x.StdoutBytes != int64(want.Len()) {
		t.Fatalf("exec: %d bytes shown, %d lost, %d in all", len(x.Stdout), x.StdoutLost, x.StdoutBytes)
	}
	o, _ := call[mcp.ExecOutputResult](t, cs, "exec_output", map[string]any{"sandbox_id": sb.ID, "exec_id": x.ExecID, "stdout_offset": 500})
	if o.StdoutFrom != 500 || o.Stdout != want.String()[500:1000] || o.StdoutLost != 0 {
		t.Fatalf("exec_output from 500: from %d, lost %d, %q...", o.StdoutFrom, o.StdoutLost, o.Stdout[:min(20, len(o.Stdout))])
	}
	o, _ = call[mcp.ExecOutputResult](t, cs, "exec_output", map[string]any{"sandbox_id": sb.ID, "exec_id": x.ExecID, "stdout_offset": 1000})
	if total := int64(want.Len()); o.StdoutLost != total-1000 || o.StdoutFrom != total || o.Stdout != "" || o.More {
		t.Fatalf("exec_output from 1000 (past what is kept on disk, the command ended): from %d, lost %d, %d bytes, more %v; want all %d past the disk copy lost",
			o.StdoutFrom, o.StdoutLost, len(o.Stdout), o.More, total-1000)
	}
}
