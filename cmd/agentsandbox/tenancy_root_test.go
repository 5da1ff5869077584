package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsandbox/agentsandbox/internal/serverproc"
	"github.com/agentsandbox/agentsandbox/internal/tenancytest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	mcpserver "github.com/agentsandbox/agentsandbox/server/mcp"
)

// The identities of the tenancy tests: a and b users, ops an admin.
const (
	tenantA   = "tenant-a-token-0123456789abcdef"
	tenantB   = "tenant-b-token-0123456789abcdef"
	tenantOps = "tenant-ops-token-0123456789abcdef"
)

// writeIdentities writes the identities file of a, b and ops, 0600.
func writeIdentities(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "identities.yaml")
	body := fmt.Sprintf(`identities:
  - name: a
    token_sha256: %s
    limits: {max_sandboxes: 4, max_runs: 1}
  - name: b
    token_sha256: %s
  - name: ops
    token_sha256: %s
    role: admin
`, hexSum([]byte(tenantA)), hexSum([]byte(tenantB)), hexSum([]byte(tenantOps)))
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// tenancyServe starts the real serve with the identities on addr and its
// socket, and returns it and the clients of a, b, ops and the socket's
// root.
func tenancyServe(t *testing.T, bin, state, addr, ids, templates string) (*serverproc.Proc, map[string]tenancytest.Client) {
	t.Helper()
	sock := filepath.Join(state, socketName)
	p, _ := serverproc.Start(t, func(l string) bool { return strings.HasPrefix(l, "serving on tcp") }, bin,
		"serve", "--state-dir", state, "--listen", addr, "--identities", ids, "--templates", templates)
	serverproc.WaitForSocket(t, sock)
	cs := map[string]tenancytest.Client{
		"uid-0": {Name: "uid-0", URL: "http://sandbox", HTTP: unixClient(sock)},
	}
	for name, tok := range map[string]string{"a": tenantA, "b": tenantB, "ops": tenantOps} {
		cs[name] = tenancytest.Client{Name: name, URL: "http://" + addr, HTTP: &http.Client{}, Header: http.Header{"Authorization": {"Bearer " + tok}}}
	}
	return p, cs
}

// bearerTransport sends a token with every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpAs connects to serve's /mcp with a token.
func mcpAs(t *testing.T, addr, token string) *sdk.ClientSession {
	t.Helper()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "0"}, nil).Connect(context.Background(),
		&sdk.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{token}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect to /mcp: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// toolErr calls a tool that must fail with code.
func toolErr(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any, code sandboxes.Code) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	text := ""
	if len(res.Content) > 0 {
		text = res.Content[0].(*sdk.TextContent).Text
	}
	if !res.IsError || !strings.HasPrefix(text, string(code)+": ") {
		t.Errorf("%s(%v): %s, want a %s error", name, args, text, code)
	}
}

// toolOK calls a tool that must succeed and returns its structured result.
func toolOK(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) map[string]any {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil || res.IsError {
		t.Fatalf("%s(%v): %v %+v", name, args, err, res)
	}
	m, _ := res.StructuredContent.(map[string]any)
	return m
}

// recordOf reads a record over MCP, and says whether it could.
func tenantRecord(cs *sdk.ClientSession, id string) (string, bool) {
	rr, err := cs.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: mcpserver.RecordURIPrefix + id})
	if err != nil || len(rr.Contents) != 1 {
		return "", false
	}
	return rr.Contents[0].Text, true
}

// recordOfSandbox finds, among the records cs is shown, the one of
// sandbox id.
func recordOfSandbox(t *testing.T, cs *sdk.ClientSession, id string) string {
	t.Helper()
	rr, err := cs.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: mcpserver.RecordsURI})
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Records []mcpserver.RecordSummary }
	json.Unmarshal([]byte(rr.Contents[0].Text), &list)
	for _, r := range list.Records {
		text, ok := tenantRecord(cs, r.ID)
		if ok && strings.Contains(text, `"sandbox":{"ended"`) && strings.Contains(text, `"id":"`+id+`"`) {
			return r.ID
		}
	}
	return ""
}

// waitRefused waits until c's requests are refused because n stalled
// ones hold c's places. It waits before it asks, and between asks: a
// request of c in flight when the last stalled one arrives takes that
// one's place (which is then refused, and waits for its body forever).
func waitRefused(t *testing.T, c tenancytest.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		time.Sleep(300 * time.Millisecond)
		st, body := c.Do(t, "GET", "/v1/sandboxes", nil)
		if st == 429 {
			if !strings.Contains(string(body), "identity "+c.Name) || !strings.Contains(string(body), "max_in_flight") {
				t.Errorf("%s's 429 does not name the identity and the limit: %s", c.Name, body)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's requests are still answered (%d %.100s) with %d stalled ones in flight", c.Name, st, body, n)
		}
	}
}

// TestServeTenancy: against the real serve over the real manager, two
// TCP identities (a, b), an admin (ops) and the socket's root (uid-0):
//   - on every REST route b gets for a's sandbox, execs and snapshots the
//     404 of an id nobody has, and so does a for the socket's; the admins
//     see and act on all;
//   - over /mcp b's tools and record resources find nothing of a's;
//   - b's inline workflow is not served a's run output from the store by
//     its digest; a's own is;
//   - each identity's max_sandboxes, max_runs and in-flight requests are
//     its own: 429 naming the limit for a, b unaffected (16 stalled
//     bodies of a do not hold up b);
//   - the decision log names the identity of each action;
//   - ownership survives a restart, after SIGKILL too: a's record (from
//     the journal) and a's snapshot are a's only.
func TestServeTenancy(t *testing.T) {
	testtier.Root(t)
	dir := t.TempDir()
	bin := buildCLI(t, dir)
	state := filepath.Join(dir, "state")
	templates := filepath.Join(dir, "templates")
	os.MkdirAll(templates, 0o755)
	ids := writeIdentities(t, dir)
	addr := serverproc.FreePort(t)
	srv, c := tenancyServe(t, bin, state, addr, ids, templates)
	a, b, ops, root := c["a"], c["b"], c["ops"], c["uid-0"]

	// REST, every route.
	sbA, snapA := tenancytest.Check(t, a, b, ops, tenancytest.Options{Network: true})
	tenancytest.Check(t, root, a, ops, tenancytest.Options{Network: true})
	tenancytest.Check(t, b, a, root, tenancytest.Options{Network: true})

	// MCP: b's tools and resources.
	mb, ma := mcpAs(t, addr, tenantB), mcpAs(t, addr, tenantA)
	for _, call := range []struct {
		tool string
		args map[string]any
	}{
		{"exec", map[string]any{"sandbox_id": sbA.ID, "argv": []string{"cat", "secret.txt"}}},
		{"read_file", map[string]any{"sandbox_id": sbA.ID, "path": "secret.txt"}},
		{"write_file", map[string]any{"sandbox_id": sbA.ID, "path": "x", "content": "y"}},
		{"list_files", map[string]any{"sandbox_id": sbA.ID}},
		{"snapshot", map[string]any{"sandbox_id": sbA.ID}},
		{"list_snapshots", map[string]any{"sandbox_id": sbA.ID}},
		{"restore", map[string]any{"sandbox_id": sbA.ID, "snapshot": snapA.ID}},
		{"sandbox_create", map[string]any{"from_snapshot": snapA.ID}},
		{"update_network", map[string]any{"sandbox_id": sbA.ID, "grant": []string{"example.com:443"}}},
		{"kill", map[string]any{"sandbox_id": sbA.ID}},
	} {
		toolErr(t, mb, call.tool, call.args, sandboxes.CodeNotFound)
	}
	if l := toolOK(t, mb, "list_sandboxes", nil); strings.Contains(fmt.Sprint(l), sbA.ID) {
		t.Errorf("b's list_sandboxes shows a's sandbox: %v", l)
	}

	// Runs and records: a's run, whose stdout is a's secret.
	run := toolOK(t, ma, "run_workflow", map[string]any{"inline": `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: a-run
steps:
  - name: s
    isolation: namespace
    run: echo A-RUN-SECRET
    resources: {timeout: 30s}
`})
	runRec, _ := run["record"].(string)
	text, ok := tenantRecord(ma, runRec)
	if !ok {
		t.Fatalf("a cannot read its own run's record %s", runRec)
	}
	if _, ok := tenantRecord(mb, runRec); ok {
		t.Errorf("b read a's run record %s", runRec)
	}
	if _, ok := tenantRecord(mb, runRec[:4]); ok {
		t.Errorf("b read a's run record by a prefix")
	}
	if _, ok := tenantRecord(mcpAs(t, addr, tenantOps), runRec); !ok {
		t.Errorf("the admin cannot read a's run record")
	}
	var rec struct {
		Owner string `json:"owner"`
		Steps []struct {
			Logs struct{ Stdout string } `json:"logs"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(text), &rec); err != nil || len(rec.Steps) != 1 || rec.Owner != "a" {
		t.Fatalf("a's run record: %v %s", err, text)
	}
	stdoutPin := `sha256: "` + strings.TrimPrefix(rec.Steps[0].Logs.Stdout, "sha256:") + `"`
	inline := map[string]string{"inline": inlineWithInput("no-such-file.txt", stdoutPin)}
	if st, body := b.Do(t, "POST", "/v1/runs", inline); st != 400 || strings.Contains(string(body), "A-RUN-SECRET") || !strings.Contains(string(body), "never from the server's store") {
		t.Errorf("b's inline run pinned to a's stdout: %d %s, want 400 without the content", st, body)
	}
	if st, body := a.Do(t, "POST", "/v1/runs", inline); st != 200 || !strings.Contains(string(body), "A-RUN-SECRET") {
		t.Errorf("a's inline run pinned to its own stdout: %d %s, want it served from the store", st, body)
	}

	// Limits: a's max_sandboxes 4 (it holds one from each check), its
	// max_runs 1; b is not held back.
	tenancytest.JSON[sandboxes.Info](t, a, "POST", "/v1/sandboxes", nil, 201)
	if st, body := a.Do(t, "POST", "/v1/sandboxes", nil); st != 429 || !strings.Contains(string(body), "max_sandboxes 4") {
		t.Errorf("a's fourth sandbox: %d %s, want 429 naming max_sandboxes", st, body)
	}
	tenancytest.JSON[sandboxes.Info](t, b, "POST", "/v1/sandboxes", nil, 201)
	slow := `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: slow
steps:
  - name: s
    isolation: namespace
    run: sleep 4
    resources: {timeout: 30s}
`
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if st, body := a.Do(t, "POST", "/v1/runs", map[string]string{"inline": slow}); st != 200 {
			t.Errorf("a's slow run: %d %s", st, body)
		}
	}()
	time.Sleep(time.Second) // the slow run holds a's place (taken before its workflow is parsed) for 4s
	if st, body := a.Do(t, "POST", "/v1/runs", map[string]string{"inline": slow}); st != 429 || !strings.Contains(string(body), "max_runs 1") {
		t.Errorf("a's second run while its first runs: %d %s, want 429 naming max_runs", st, body)
	}
	if st, body := b.Do(t, "POST", "/v1/runs", map[string]string{"inline": strings.Replace(slow, "sleep 4", "echo b", 1)}); st != 200 {
		t.Errorf("b's run while a runs: %d %s", st, body)
	}
	wg.Wait()

	// 16 stalled bodies of a: a is refused, b is answered.
	for range 16 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 1000\r\n\r\n{", tenantA)
	}
	waitRefused(t, a, 16)
	for range 5 {
		start := time.Now()
		tenancytest.JSON[struct{ Sandboxes []sandboxes.Info }](t, b, "GET", "/v1/sandboxes", nil, 200)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("b waited %s while a's bodies stall", d)
		}
	}

	// The decision log names who asked.
	logged, err := os.ReadFile(filepath.Join(state, decisionLogName))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(logged)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev struct {
			Input struct {
				Action   string `json:"action"`
				Identity *struct{ Name, Role string }
			} `json:"input"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Input.Identity != nil {
			seen[ev.Input.Action+" "+ev.Input.Identity.Name+" "+ev.Input.Identity.Role] = true
		}
	}
	for _, w := range []string{"create a user", "file_write a user", "exec a user", "snapshot a user", "run_workflow a user", "create ops admin", "create uid-0 admin"} {
		if !seen[w] {
			t.Errorf("the decision log has no %q action (seen %v)", w, seen)
		}
	}

	// A sandbox of a with an entry, then SIGKILL: its record comes from
	// the journal at the next start, still a's.
	sbK := tenancytest.JSON[sandboxes.Info](t, ops, "GET", "/v1/sandboxes/"+sbA.ID, nil, 200)
	if sbK.State != sandboxes.StateRunning {
		t.Fatalf("a's sandbox before the kill: %+v", sbK)
	}
	if err := srv.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for !srv.Exited() {
		time.Sleep(20 * time.Millisecond)
	}
	srv2, c2 := tenancyServe(t, bin, state, addr, ids, templates)
	a2, b2 := c2["a"], c2["b"]
	ma2, mb2 := mcpAs(t, addr, tenantA), mcpAs(t, addr, tenantB)
	recA := recordOfSandbox(t, ma2, sbA.ID)
	if recA == "" {
		t.Fatalf("a is not shown the record of its sandbox %s after the restart", sbA.ID)
	}
	if text, _ := tenantRecord(ma2, recA); !strings.Contains(text, `"owner":"a"`) || !strings.Contains(text, `"ended":"server killed"`) {
		t.Errorf("a's recovered record: %s", text)
	}
	if _, ok := tenantRecord(mb2, recA); ok {
		t.Errorf("b read a's recovered record %s", recA)
	}
	if got := recordOfSandbox(t, mb2, sbA.ID); got != "" {
		t.Errorf("b is shown a's recovered record %s", got)
	}
	// a's snapshot went with its sandbox (a snapshot lasts while the
	// sandbox that took it runs; the server's start collects what a killed
	// server left): a and b alike get the 404 of no snapshot, b's word for
	// word a's, so b learns nothing of a's.
	stA, bodyA := a2.Do(t, "POST", "/v1/sandboxes", sandboxes.Spec{FromSnapshot: snapA.ID})
	stB, bodyB := b2.Do(t, "POST", "/v1/sandboxes", sandboxes.Spec{FromSnapshot: snapA.ID})
	if stA != 404 || stB != 404 || string(bodyA) != string(bodyB) {
		t.Errorf("forks of a's collected snapshot after the restart: a %d %s, b %d %s", stA, bodyA, stB, bodyB)
	}
	if out, err := srv2.Stop(); err != nil {
		t.Errorf("serve after SIGTERM: %v\n%s", err, out)
	}
}
