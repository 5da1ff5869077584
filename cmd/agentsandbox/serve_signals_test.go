package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/serverproc"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/policy"
)

const serveTestToken = "serve-test-token-0123456789"

// denyExecRego is a policy folder's rule that denies exec of cmd.
func denyExecRego(cmd string) string {
	return `package agentsandbox

deny_action contains msg if {
	input.action == "exec"
	input.command[0] == "` + cmd + `"
	msg := "` + cmd + ` is not allowed here"
}
`
}

// serveCall is one request to a server's unix socket: its status and
// body.
func serveCall(t *testing.T, c *http.Client, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://sandbox"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if method == "POST" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// serveCreate creates a sandbox of spec and returns its id.
func serveCreate(t *testing.T, c *http.Client, spec string) string {
	t.Helper()
	code, body := serveCall(t, c, "POST", "/v1/sandboxes", spec)
	var info struct{ ID string }
	json.Unmarshal([]byte(body), &info)
	if code != 201 || info.ID == "" {
		t.Fatalf("create %s: %d %s", spec, code, body)
	}
	return info.ID
}

// serveExec runs argv in sandbox id: the HTTP status, and the stdout of
// a stream (or the error body).
func serveExec(t *testing.T, c *http.Client, id string, argv ...string) (int, string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"argv": argv})
	code, body := serveCall(t, c, "POST", "/v1/sandboxes/"+id+"/exec", string(b))
	if code != 200 {
		return code, body
	}
	var out strings.Builder
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		var ev struct{ Type, Text string }
		json.Unmarshal(sc.Bytes(), &ev)
		if ev.Type == "stdout" {
			out.WriteString(ev.Text)
		}
	}
	return code, out.String()
}

// TestServeHangupReloadsPolicy: SIGHUP to a real serve reloads the
// policy from its --policy folder (the next exec is judged by the new
// rules), and the server and its sandboxes keep working; a reload that
// fails keeps the policy in force. SIGHUP used to kill the process (Go's
// default), leaving its sandboxes' netns, mounts and run directories.
func TestServeHangupReloadsPolicy(t *testing.T) {
	testtier.Root(t)
	polDir := t.TempDir()
	rule := filepath.Join(polDir, "deny.rego")
	if err := os.WriteFile(rule, []byte(denyExecRego("date")), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := serverproc.Serve(t, serveTestToken, "--policy", polDir)
	p := srv.Procs[0]
	c := unixClient(srv.Socket)
	id := serveCreate(t, c, `{"labels": {"test": "hup"}}`)
	if code, out := serveExec(t, c, id, "id", "-u"); code != 200 || out != "65534\n" {
		t.Fatalf("exec id under the first policy: %d %q", code, out)
	}
	if code, body := serveExec(t, c, id, "date"); code != 403 || !strings.Contains(body, "date is not allowed here") {
		t.Fatalf("exec date under the first policy: %d %s", code, body)
	}

	if err := os.WriteFile(rule, []byte(denyExecRego("id")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	_, seen := p.WaitFor(t, 0, func(l string) bool { return strings.HasPrefix(l, "SIGHUP: policy reloaded (bundle sha256:") }, time.Minute)
	if code, body := serveExec(t, c, id, "id", "-u"); code != 403 || !strings.Contains(body, "id is not allowed here") || !strings.Contains(body, "policy_denied") {
		t.Errorf("exec id after the reload: %d %s", code, body)
	}
	if code, out := serveExec(t, c, id, "date", "+ok"); code != 200 || out != "ok\n" {
		t.Errorf("exec date after the reload: %d %q", code, out)
	}
	if code, body := serveCall(t, c, "PUT", "/v1/sandboxes/"+id+"/files/after-hup.txt", "still here"); code != 200 {
		t.Errorf("put a file after the reload: %d %s", code, body)
	}
	// A new sandbox is admitted by the new policy too.
	id2 := serveCreate(t, c, `{}`)
	if code, _ := serveExec(t, c, id2, "id"); code != 403 {
		t.Errorf("exec id in a sandbox created after the reload: %d", code)
	}

	// A policy that does not compile is reported; the one in force stays.
	if err := os.WriteFile(rule, []byte("package agentsandbox\n\ndeny_action contains msg if {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Signal(syscall.SIGHUP)
	p.WaitFor(t, seen, func(l string) bool {
		return strings.HasPrefix(l, "SIGHUP: policy reload failed; the policy in force stays:")
	}, time.Minute)
	if code, _ := serveExec(t, c, id, "id"); code != 403 {
		t.Errorf("exec id after a failed reload: %d, want the last good policy's 403", code)
	}
	if code, out := serveExec(t, c, id, "cat", "after-hup.txt"); code != 200 || out != "still here" {
		t.Errorf("the sandbox after two SIGHUPs: %d %q", code, out)
	}
	if p.Exited() {
		t.Fatalf("serve exited on SIGHUP:\n%s", p.Output())
	}
	srv.Stop(t) // SIGTERM: exit 0
	if runs, _ := os.ReadDir(filepath.Join(srv.State, "runs")); len(runs) != 0 {
		t.Errorf("sandbox directories left after SIGTERM: %v", runs)
	}
}

// TestServeDecisionLog: a real serve writes STATE-DIR/serve-decisions.log
// (0600), one OPA decision log event per decision: the admission of a
// sandbox's workflow, and its create, exec and file write actions, allowed
// or not, with the decision ids the API returned. cmd_serve.go never set
// the manager's log, so the file docs/api.md and docs/policy.md promise
// was never written.
func TestServeDecisionLog(t *testing.T) {
	testtier.Root(t)
	polDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(polDir, "deny.rego"), []byte(denyExecRego("date")), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := serverproc.Serve(t, serveTestToken, "--policy", polDir)
	c := unixClient(srv.Socket)
	id := serveCreate(t, c, `{"labels": {"test": "decisions"}}`)
	if code, out := serveExec(t, c, id, "echo", "hi"); code != 200 || out != "hi\n" {
		t.Fatalf("exec: %d %q", code, out)
	}
	code, body := serveExec(t, c, id, "date")
	var resp struct {
		Error struct{ Code, Decision string }
	}
	json.Unmarshal([]byte(body), &resp)
	denied := resp.Error
	if code != 403 || denied.Code != "policy_denied" || denied.Decision == "" {
		t.Fatalf("exec date: %d %s", code, body)
	}
	if code, body := serveCall(t, c, "PUT", "/v1/sandboxes/"+id+"/files/notes.txt", "kept"); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	srv.Stop(t)

	path := filepath.Join(srv.State, decisionLogName)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("no decision log: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("decision log mode %v, want 0600", st.Mode().Perm())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	evs, err := policy.DecodeDecisionLog(f) // strict: every line one event
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		path, action, requestedBy string
		allowed                   bool
	}
	var got []seen
	instance, bundle := "", ""
	for _, ev := range evs {
		var in struct{ Action string }
		json.Unmarshal(ev.Input, &in)
		var res struct{ Allowed bool }
		json.Unmarshal(ev.Result, &res)
		got = append(got, seen{ev.Path, in.Action, ev.RequestedBy, res.Allowed})
		if ev.Labels["type"] != "agentsandbox" || ev.Labels["id"] == "" || ev.DecisionID == "" || ev.Timestamp.IsZero() {
			t.Errorf("event without its labels, id or time: %+v", ev)
		}
		if instance == "" {
			instance = ev.Labels["id"]
		} else if ev.Labels["id"] != instance {
			t.Errorf("labels.id %s and %s: want one per server process", instance, ev.Labels["id"])
		}
		b := ev.Bundles["agentsandbox"].Revision
		if bundle == "" {
			bundle = b
		} else if b != bundle || !strings.HasPrefix(b, "sha256:") {
			t.Errorf("bundle revisions %s and %s", bundle, b)
		}
		if in.Action == "exec" && !res.Allowed && ev.DecisionID != denied.Decision {
			t.Errorf("the denied exec's decision_id %s, but the API said %s", ev.DecisionID, denied.Decision)
		}
	}
	want := []seen{
		{"agentsandbox/deny_action", "create", "", true},
		{"agentsandbox", "", "sandbox:" + id, true},
		{"agentsandbox/deny_action", "exec", "sandbox:" + id, true},
		{"agentsandbox/deny_action", "exec", "sandbox:" + id, false},
		{"agentsandbox/deny_action", "file_write", "sandbox:" + id, true},
	}
	if len(got) != len(want) {
		t.Fatalf("decision log:\n%+v\nwant\n%+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestServeLimits: through a real serve, warm sandboxes count against
// --max-sandboxes (with 3 and --warm 2, one create of another spec fits,
// the next is refused: three used to succeed), a run holds its --max-runs
// place before its workflow is parsed (a full server refuses a request
// that does not even parse with the limit), and the 670-byte merge bomb
// POSTed to /v1/runs is refused at its position at once (it cost the
// server seconds of CPU, also for a client that gave up).
func TestServeLimits(t *testing.T) {
	testtier.Root(t)
	srv := serverproc.Serve(t, serveTestToken, "--max-sandboxes", "3", "--warm", "2", "--max-runs", "1")
	p := srv.Procs[0]
	c := unixClient(srv.Socket)
	warmReady := func(l string) bool { return strings.HasPrefix(l, "warm pool of the default spec: sandbox ") }
	_, n := p.WaitFor(t, 0, warmReady, 2*time.Minute)
	p.WaitFor(t, n, warmReady, 2*time.Minute)

	serveCreate(t, c, `{"env": {"A": "1"}}`)
	if code, body := serveCall(t, c, "POST", "/v1/sandboxes", `{"env": {"A": "2"}}`); code != 429 || !strings.Contains(body, "limit_exceeded") || !strings.Contains(body, "(1 running, 2 warm)") {
		t.Errorf("a second create of another spec with 2 warm of 3: %d %s", code, body)
	}

	bomb, err := os.ReadFile("../../workflow/testdata/bad/alias-bomb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(map[string]string{"inline": string(bomb)})
	start := time.Now()
	code, body := serveCall(t, c, "POST", "/v1/runs", string(req))
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("refusing the alias bomb took %v", took)
	}
	if code != 400 || !strings.Contains(body, "inline-workflow.yaml:10:32: with this alias *m4,") || !strings.Contains(body, "repeat more than 100000 nodes") {
		t.Errorf("POST /v1/runs of the alias bomb: %d %s", code, body)
	}

	// One run holds the one place; then a request that does not parse
	// is refused with the limit, not with its parse error.
	// The slow run holds its place for 20 s; until it is admitted a
	// malformed run gets its parse error, and once the slow run ended
	// without a 429 seen the test says so instead of waiting on.
	slow, _ := json.Marshal(map[string]string{"inline": "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: slow\nsteps:\n  - name: wait\n    isolation: namespace\n    run: sleep 20\n"})
	done := make(chan string, 1)
	go func() {
		// A malformed run below holds the one place while it is judged:
		// the slow run that meets it is refused with the limit, and sent
		// again.
		for {
			code, body := serveCall(t, c, "POST", "/v1/runs", string(slow))
			if code == 429 && strings.Contains(body, "already runs 1 workflows") && time.Since(start) < time.Minute {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			done <- fmt.Sprintf("%d %s", code, body)
			return
		}
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := serveCall(t, c, "POST", "/v1/runs", `{"inline": "steps: [unclosed"}`)
		if code == 429 && strings.Contains(body, "already runs 1 workflows") {
			break
		}
		select {
		case got := <-done:
			t.Fatalf("the slow run ended (%s) before a malformed run was refused with the limit; the last answer: %d %s", got, code, body)
		default:
		}
		if code != 400 || time.Now().After(deadline) {
			t.Fatalf("a malformed run while another runs: %d %s, want 429 limit_exceeded", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := <-done; !strings.HasPrefix(got, "200 ") || !strings.Contains(got, `"status":"succeeded"`) {
		t.Errorf("the slow run: %s", got)
	}
	srv.Stop(t)
}

// openDecisionLog makes the log 0600 and appends to it; a symlink or a
// FIFO in its place is refused (the FIFO at once, not blocking the
// server's start).
func TestOpenDecisionLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, decisionLogName)
	for _, line := range []string{"one\n", "two\n"} {
		f, err := openDecisionLog(dir)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(line)
		f.Close()
	}
	if b, _ := os.ReadFile(path); string(b) != "one\ntwo\n" {
		t.Errorf("log %q, want both lines appended", b)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode().Perm())
	}

	link := t.TempDir()
	os.Symlink(path, filepath.Join(link, decisionLogName))
	if f, err := openDecisionLog(link); err == nil {
		f.Close()
		t.Error("a symlink was followed")
	}
	fifo := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(fifo, decisionLogName), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		f, err := openDecisionLog(fifo)
		if err == nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a FIFO was taken for the log")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("opening a FIFO as the log blocked")
	}
}
