package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/sandboxes"
)

const testToken = "s3cret-token"

type env struct {
	t    *testing.T
	s    *Server
	fake *managertest.Manager
	url  string
	c    *http.Client
}

// newEnv serves the real manager on the fake backend over httptest (TCP,
// with the token).
func newEnv(t *testing.T, mod func(*Options)) *env {
	t.Helper()
	return newEnvWith(t, mod, sandboxes.Options{})
}

// newEnvWith is newEnv with the manager's options.
func newEnvWith(t *testing.T, mod func(*Options), mo sandboxes.Options) *env {
	t.Helper()
	fake := managertest.New(t, mo)
	o := Options{Manager: fake, Token: testToken, Version: "test"}
	if mod != nil {
		mod(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	t.Cleanup(func() { fake.Close(context.Background()) })
	return &env{t: t, s: s, fake: fake, url: ts.URL, c: ts.Client()}
}

// req sends a request with the token; body is []byte, string, io.Reader
// or a value sent as JSON.
func (e *env) req(method, path string, body any, hdr ...string) *http.Response {
	e.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	case string:
		r = strings.NewReader(b)
	case io.Reader:
		r = b
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.url+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.c.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// want checks the status and decodes the JSON answer into v (when not nil).
func want[T any](t *testing.T, resp *http.Response, status int) T {
	t.Helper()
	var v T
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d: %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, status, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s: Content-Type %q, want application/json", resp.Request.Method, resp.Request.URL.Path, ct)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s %s: decode %s: %v", resp.Request.Method, resp.Request.URL.Path, b, err)
	}
	return v
}

// wantErr checks an error answer's status and code, and that its message
// contains each of substrings.
func wantErr(t *testing.T, resp *http.Response, status int, code sandboxes.Code, substrings ...string) sandboxes.Error {
	t.Helper()
	e := want[ErrorBody](t, resp, status).Error
	if e.Code != code {
		t.Fatalf("%s %s: code %q, want %q (%s)", resp.Request.Method, resp.Request.URL.Path, e.Code, code, e.Message)
	}
	if e.Message == "" {
		t.Fatalf("%s %s: an error without a message", resp.Request.Method, resp.Request.URL.Path)
	}
	for _, s := range substrings {
		if !strings.Contains(e.Message, s) {
			t.Errorf("%s %s: message %q does not mention %q", resp.Request.Method, resp.Request.URL.Path, e.Message, s)
		}
	}
	return e
}

func (e *env) create(spec sandboxes.Spec) sandboxes.Info {
	e.t.Helper()
	return want[sandboxes.Info](e.t, e.req("POST", "/v1/sandboxes", spec), http.StatusCreated)
}

// events reads an NDJSON stream to its end.
func events(t *testing.T, resp *http.Response) []sandboxes.ExecEvent {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("Content-Type %q, want application/x-ndjson", ct)
	}
	var evs []sandboxes.ExecEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev sandboxes.ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return evs
}

// text joins a stream's text; last is its last event.
func text(evs []sandboxes.ExecEvent, typ string) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type == typ {
			b.WriteString(ev.Text)
			b.Write(ev.Base64)
		}
	}
	return b.String()
}

func TestHealthAndOpenAPI(t *testing.T) {
	e := newEnv(t, nil)
	h := want[Health](t, e.req("GET", "/v1/health", nil), 200)
	if !h.OK || h.Version != "test" {
		t.Errorf("health = %+v", h)
	}
	doc := want[map[string]any](t, e.req("GET", "/openapi.json", nil), 200)
	if !strings.HasPrefix(fmt.Sprint(doc["openapi"]), "3.1.") {
		t.Errorf("openapi = %v", doc["openapi"])
	}
}

func TestSandboxLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	a := e.create(sandboxes.Spec{Labels: map[string]string{"project": "demo", "who": "a"}, TTL: sandboxes.Duration(time.Hour)})
	b := e.create(sandboxes.Spec{Labels: map[string]string{"project": "other"}})
	if a.ID == "" || a.State != sandboxes.StateRunning || a.Labels["who"] != "a" {
		t.Fatalf("created %+v", a)
	}
	got := want[sandboxes.Info](t, e.req("GET", "/v1/sandboxes/"+a.ID, nil), 200)
	if got.ID != a.ID {
		t.Errorf("get: %+v", got)
	}
	all := want[SandboxList](t, e.req("GET", "/v1/sandboxes", nil), 200)
	if len(all.Sandboxes) != 2 {
		t.Errorf("list: %d sandboxes, want 2", len(all.Sandboxes))
	}
	some := want[SandboxList](t, e.req("GET", "/v1/sandboxes?label=project=demo&label=who=a", nil), 200)
	if len(some.Sandboxes) != 1 || some.Sandboxes[0].ID != a.ID {
		t.Errorf("list by labels: %+v", some)
	}
	none := want[map[string]any](t, e.req("GET", "/v1/sandboxes?label=project=nothing", nil), 200)
	if l, ok := none["sandboxes"].([]any); !ok || len(l) != 0 {
		t.Errorf("an empty list is %v, want []", none["sandboxes"])
	}
	wantErr(t, e.req("GET", "/v1/sandboxes?label=nokey", nil), 400, sandboxes.CodeBadRequest, "KEY=VALUE")

	ext := want[sandboxes.Info](t, e.req("POST", "/v1/sandboxes/"+a.ID+"/extend", ExtendRequest{TTL: sandboxes.Duration(3 * time.Hour), IdleTimeout: sandboxes.Duration(20 * time.Minute)}), 200)
	if !ext.ExpiresAt.After(a.ExpiresAt.Add(time.Hour)) || ext.IdleTimeout.D() != 20*time.Minute {
		t.Errorf("extend: expires %v (was %v), idle %v", ext.ExpiresAt, a.ExpiresAt, ext.IdleTimeout.D())
	}
	wantErr(t, e.req("POST", "/v1/sandboxes/"+a.ID+"/extend", `{"ttl": "soon"}`), 400, sandboxes.CodeBadRequest, "soon")
	wantErr(t, e.req("POST", "/v1/sandboxes/"+a.ID+"/extend", `{}`), 400, sandboxes.CodeBadRequest, "ttl")

	killed := want[sandboxes.Info](t, e.req("DELETE", "/v1/sandboxes/"+a.ID, nil), 200)
	if killed.State != sandboxes.StateStopped || killed.Record == "" || killed.Ended != "killed" {
		t.Errorf("kill: %+v", killed)
	}
	wantErr(t, e.req("POST", "/v1/sandboxes/"+a.ID+"/exec", sandboxes.ExecRequest{Argv: []string{"true"}}), 409, sandboxes.CodeConflict, "stopped")
	wantErr(t, e.req("PUT", "/v1/sandboxes/"+a.ID+"/files/x", "x"), 409, sandboxes.CodeConflict)
	_ = b

	for _, p := range []string{
		"GET /v1/sandboxes/nope", "DELETE /v1/sandboxes/nope", "POST /v1/sandboxes/nope/exec",
		"GET /v1/sandboxes/nope/execs/ex-1", "GET /v1/sandboxes/nope/files/a", "GET /v1/sandboxes/nope/ls",
		"GET /v1/sandboxes/" + b.ID + "/execs/ex-99", "POST /v1/sandboxes/" + b.ID + "/execs/ex-99/wait",
	} {
		method, path, _ := strings.Cut(p, " ")
		body := any(nil)
		if method == "POST" {
			body = sandboxes.ExecRequest{Argv: []string{"true"}}
		}
		wantErr(t, e.req(method, path, body), 404, sandboxes.CodeNotFound)
	}
	wantErr(t, e.req("POST", "/v1/sandboxes", sandboxes.Spec{Isolation: "chroot"}), 400, sandboxes.CodeBadRequest, "chroot")
}

func TestCreateLimit(t *testing.T) {
	e := newEnvWith(t, nil, sandboxes.Options{MaxSandboxes: 1})
	e.create(sandboxes.Spec{})
	wantErr(t, e.req("POST", "/v1/sandboxes", nil), 429, sandboxes.CodeLimit, "kill one")
}

func TestExecForeground(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(sandboxes.Spec{Env: map[string]string{"GREETING": "hi"}})
	stdin := "from stdin"
	evs := events(t, e.req("POST", "/v1/sandboxes/"+sb.ID+"/exec", sandboxes.ExecRequest{
		Shell: "echo $GREETING $NAME; cat; echo oops >&2; exit 3", Env: map[string]string{"NAME": "you"}, Stdin: &stdin}))
	// The stream begins when the command starts, before any output.
	if evs[0].Type != sandboxes.EventStarted || evs[0].ExecID == "" || evs[0].Time.IsZero() {
		t.Errorf("first event %+v, want started with the exec's id and time", evs[0])
	}
	if evs[1].Type != sandboxes.EventStdout || evs[1].ExecID != evs[0].ExecID {
		t.Errorf("second event %+v, want stdout of the same exec", evs[1])
	}
	last := evs[len(evs)-1]
	if last.Type != sandboxes.EventExit || last.Exit == nil || last.Exit.ExitCode != 3 {
		t.Errorf("last event %+v, want exit 3", last)
	}
	if got := text(evs, "stdout"); got != "hi you\nfrom stdin" {
		t.Errorf("stdout %q", got)
	}
	if got := text(evs, "stderr"); got != "oops\n" {
		t.Errorf("stderr %q", got)
	}
	// A command that cannot start is an error event, not an exit.
	evs = events(t, e.req("POST", "/v1/sandboxes/"+sb.ID+"/exec", sandboxes.ExecRequest{Argv: []string{"/no/such/command"}}))
	if last := evs[len(evs)-1]; last.Type != sandboxes.EventError || !strings.Contains(last.Error, "/no/such/command") {
		t.Errorf("events %+v, want an error event", evs)
	}
	// Bytes that are not UTF-8 come as base64.
	evs = events(t, e.req("POST", "/v1/sandboxes/"+sb.ID+"/exec", sandboxes.ExecRequest{Shell: `printf '\377\376'`}))
	if got := text(evs, "stdout"); got != "\xff\xfe" {
		t.Errorf("binary stdout %q", got)
	}
	wantErr(t, e.req("POST", "/v1/sandboxes/"+sb.ID+"/exec", sandboxes.ExecRequest{}), 400, sandboxes.CodeBadRequest, "argv")
	// A timeout ends the command (the agent's SIGTERM, SIGKILL if it stays).
	evs = events(t, e.req("POST", "/v1/sandboxes/"+sb.ID+"/exec", sandboxes.ExecRequest{Argv: []string{"sleep", "10"}, Timeout: sandboxes.Duration(100 * time.Millisecond)}))
	if last := evs[len(evs)-1]; last.Exit == nil || !last.Exit.TimedOut || last.Exit.Signal != "SIGTERM" && last.Exit.Signal != "SIGKILL" {
		t.Errorf("timed out: %+v", last)
	}
}

// TestExecFlushes reads the first line of output while the command is
// still running.
func TestExecFlushes(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(sandboxes.Spec{})
	start := time.Now()
	resp := e.req("POST", "/v1/sandboxes/"+sb.ID+"/exec", sandboxes.ExecRequest{Shell: "echo first; sleep 2; echo second"})
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		var ev sandboxes.ExecEvent
		json.Unmarshal([]byte(line), &ev)
		if ev.Type == sandboxes.EventStdout {
			if ev.Text != "first\n" {
				t.Fatalf("first output %q", ev.Text)
			}
			break
		}
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("the first line came after %v: the stream is not flushed as it comes", d)
	}
	rest, _ := io.ReadAll(br)
	if !bytes.Contains(rest, []byte(`"second\n"`)) || !bytes.Contains(rest, []byte(`"type":"exit"`)) {
		t.Errorf("rest of the stream: %s", rest)
	}
}

func TestExecSSE(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(sandboxes.Spec{})
	for _, c := range []struct {
		query string
		hdr   []string
	}{{"?sse=1", nil}, {"", []string{"Accept", "text/event-stream"}}} {
		resp := e.req("POST", "/v1/sandboxes/"+sb.ID+"/exec"+c.query, sandboxes.ExecRequest{Argv: []string{"echo", "hello"}}, c.hdr...)
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("Content-Type %q", ct)
		}
		b, _ := io.ReadAll(resp.Body)
		blocks := strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n")
		var types []string
		for _, blk := range blocks {
			ev, data, ok := strings.Cut(blk, "\n")
			if !ok || !strings.HasPrefix(ev, "event: ") || !strings.HasPrefix(data, "data: ") {
				t.Fatalf("SSE block %q", blk)
			}
			var x sandboxes.ExecEvent
			if err := json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &x); err != nil || x.Type != strings.TrimPrefix(ev, "event: ") {
				t.Fatalf("SSE block %q: %v", blk, err)
			}
			types = append(types, x.Type)
		}
		if strings.Join(types, ",") != "started,stdout,exit" {
			t.Errorf("SSE events %v", types)
		}
	}
}

func TestBackgroundExec(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(sandboxes.Spec{})
	base := "/v1/sandboxes/" + sb.ID
	info := want[sandboxes.ExecInfo](t, e.req("POST", base+"/exec", sandboxes.ExecRequest{Shell: "printf abc; sleep 0.3; printf def >&2; printf ghi", Background: true}), 202)
	if info.ID == "" || !info.Running || info.Sandbox != sb.ID {
		t.Fatalf("background: %+v", info)
	}
	evs := events(t, e.req("GET", base+"/execs/"+info.ID+"/output?follow=1", nil))
	if text(evs, "stdout") != "abcghi" || text(evs, "stderr") != "def" || evs[len(evs)-1].Type != sandboxes.EventExit {
		t.Fatalf("followed output: %+v", evs)
	}
	// From offsets, without follow: only what is after them, then the exit.
	evs = events(t, e.req("GET", base+"/execs/"+info.ID+"/output?stdout=3&stderr=3", nil))
	if len(evs) != 2 || evs[0].Text != "ghi" || evs[0].Offset != 3 || evs[1].Type != sandboxes.EventExit {
		t.Fatalf("output from offsets: %+v", evs)
	}
	done := want[sandboxes.ExecInfo](t, e.req("GET", base+"/execs/"+info.ID, nil), 200)
	if done.Running || done.Exit == nil || done.StdoutBytes != 6 || done.StderrBytes != 3 {
		t.Errorf("finished exec: %+v", done)
	}
	ev := want[sandboxes.ExecEvent](t, e.req("POST", base+"/execs/"+info.ID+"/wait", nil), 200)
	if ev.Type != sandboxes.EventExit || ev.Exit == nil || ev.Exit.ExitCode != 0 {
		t.Errorf("wait on a finished exec: %+v", ev)
	}
	wantErr(t, e.req("GET", base+"/execs/"+info.ID+"/output?stdout=-1", nil), 400, sandboxes.CodeBadRequest, "stdout")
	wantErr(t, e.req("GET", base+"/execs/"+info.ID+"/output?follow=yes", nil), 400, sandboxes.CodeBadRequest, "follow")
	// A background command that cannot start is accepted; its wait says why.
	bad := want[sandboxes.ExecInfo](t, e.req("POST", base+"/exec", sandboxes.ExecRequest{Argv: []string{"/no/such/command"}, Background: true}), 202)
	if ev := want[sandboxes.ExecEvent](t, e.req("POST", base+"/execs/"+bad.ID+"/wait", nil), 200); ev.Type != sandboxes.EventError || !strings.Contains(ev.Error, "/no/such/command") {
		t.Errorf("wait on a command that could not start: %+v", ev)
	}
}

func TestSignalAndWait(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(sandboxes.Spec{})
	base := "/v1/sandboxes/" + sb.ID
	info := want[sandboxes.ExecInfo](t, e.req("POST", base+"/exec", sandboxes.ExecRequest{Argv: []string{"sleep", "30"}, Background: true}), 202)
	waited := make(chan sandboxes.ExecEvent)
	go func() {
		resp := e.req("POST", base+"/execs/"+info.ID+"/wait", nil)
		var ev sandboxes.ExecEvent
		json.NewDecoder(resp.Body).Decode(&ev)
		waited <- ev
	}()
	wantErr(t, e.req("POST", base+"/execs/"+info.ID+"/signal", SignalRequest{Signal: "SIGNOPE"}), 400, sandboxes.CodeBadRequest, "SIGTERM")
	wantErr(t, e.req("POST", base+"/execs/"+info.ID+"/signal", `{}`), 400, sandboxes.CodeBadRequest, "signal")
	resp := e.req("POST", base+"/execs/"+info.ID+"/signal", SignalRequest{Signal: "SIGTERM"})
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("signal: status %d", resp.StatusCode)
	}
	select {
	case ev := <-waited:
		if ev.Type != sandboxes.EventExit || ev.Exit == nil || ev.Exit.Signal != "SIGTERM" {
			t.Errorf("wait: %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("wait did not return after the signal")
	}
	wantErr(t, e.req("POST", base+"/execs/"+info.ID+"/signal", SignalRequest{Signal: "SIGTERM"}), 409, sandboxes.CodeConflict, "ended")
}

func TestFiles(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(sandboxes.Spec{})
	base := "/v1/sandboxes/" + sb.ID
	content := "print('hello')\n"
	fi := want[sandboxes.FileInfo](t, e.req("PUT", base+"/files/src/app/main.py?mode=0755", content), 200)
	if fi.Path != "src/app/main.py" || fi.Type != "file" || fi.Size != int64(len(content)) || fi.Mode != "0755" || len(fi.SHA256) != 64 {
		t.Errorf("put: %+v", fi)
	}
	// Chunked, without a Content-Length.
	want[sandboxes.FileInfo](t, e.req("PUT", base+"/files/src/b.txt", io.MultiReader(strings.NewReader("b"))), 200)

	resp := e.req("GET", base+"/files/src/app/main.py", nil)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != content || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("get: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	if got := resp.Trailer.Get("X-Agentsandbox-Sha256"); got != fi.SHA256 {
		t.Errorf("get: sha256 trailer %q, want %q", got, fi.SHA256)
	}
	// The exec sees the file.
	evs := events(t, e.req("POST", base+"/exec", sandboxes.ExecRequest{Argv: []string{"cat", "main.py"}, Cwd: "src/app"}))
	if text(evs, "stdout") != content {
		t.Errorf("exec cat: %+v", evs)
	}
	st := want[sandboxes.FileInfo](t, e.req("GET", base+"/stat/src/app", nil), 200)
	if st.Type != "dir" || st.Path != "src/app" {
		t.Errorf("stat: %+v", st)
	}
	root := want[FileList](t, e.req("GET", base+"/ls", nil), 200)
	if len(root.Files) != 1 || root.Files[0].Path != "src" {
		t.Errorf("ls: %+v", root)
	}
	src := want[FileList](t, e.req("GET", base+"/ls/src", nil), 200)
	if len(src.Files) != 2 || src.Files[0].Path != "src/app" || src.Files[1].Path != "src/b.txt" {
		t.Errorf("ls src: %+v", src)
	}
	wantErr(t, e.req("GET", base+"/files/src", nil), 409, sandboxes.CodeConflict, "directory")
	wantErr(t, e.req("GET", base+"/ls/src/b.txt", nil), 409, sandboxes.CodeConflict)
	wantErr(t, e.req("DELETE", base+"/files/src", nil), 409, sandboxes.CodeConflict, "recursive")
	wantErr(t, e.req("PUT", base+"/files/x?mode=999", "x"), 400, sandboxes.CodeBadRequest, "mode")
	if resp := e.req("DELETE", base+"/files/src?recursive=1", nil); resp.StatusCode != 204 {
		t.Fatalf("remove: %d", resp.StatusCode)
	}
	wantErr(t, e.req("GET", base+"/files/src/b.txt", nil), 404, sandboxes.CodeNotFound)
	wantErr(t, e.req("GET", base+"/stat/src", nil), 404, sandboxes.CodeNotFound)
	wantErr(t, e.req("DELETE", base+"/files/src", nil), 404, sandboxes.CodeNotFound)
	// An empty file is an empty answer.
	want[sandboxes.FileInfo](t, e.req("PUT", base+"/files/empty", ""), 200)
	if resp := e.req("GET", base+"/files/empty", nil); resp.StatusCode != 200 {
		t.Errorf("get empty: %d", resp.StatusCode)
	}
}

func TestTraversal(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(sandboxes.Spec{})
	base := "/v1/sandboxes/" + sb.ID
	if err := os.Symlink("/etc", filepath.Join(e.fake.Dir(context.Background(), sb.ID), "etc")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", base + "/files/../../../etc/passwd"},
		{"GET", base + "/files/a/../../etc/passwd"},
		{"GET", base + "/files/%2e%2e/%2e%2e/etc/passwd"},
		{"GET", base + "/files/..%2f..%2fetc%2fpasswd"},
		{"GET", base + "/files//etc/passwd"},
		{"GET", base + "/files/%2Fetc%2Fpasswd"},
		{"GET", base + "/files/a%00b"},
		{"GET", base + "/files/etc/passwd"}, // through a symlink out of the workspace
		{"PUT", base + "/files/etc/evil"},
		{"GET", base + "/ls/etc"},
		{"GET", base + "/stat/.."},
		{"GET", base + "/ls/.."},
		{"PUT", base + "/files/"},
		{"DELETE", base + "/files/.."},
		{"DELETE", base + "/files/"},
	} {
		resp := e.req(c.method, c.path, "x")
		b, _ := io.ReadAll(resp.Body)
		// ls of the symlink: the real manager opens it beneath the
		// workspace, where it is not a directory.
		if resp.StatusCode != 400 && resp.StatusCode != 404 && !(c.path == base+"/ls/etc" && resp.StatusCode == 409) {
			t.Errorf("%s %s: status %d, want 400 or 404: %s", c.method, c.path, resp.StatusCode, b)
			continue
		}
		var eb ErrorBody
		if err := json.Unmarshal(b, &eb); err != nil || eb.Error.Message == "" {
			t.Errorf("%s %s: not a JSON error: %s", c.method, c.path, b)
		}
	}
	if _, err := os.Stat("/etc/evil"); err == nil {
		t.Fatal("a put wrote /etc/evil")
	}
}

func TestTooLarge(t *testing.T) {
	e := newEnv(t, nil)
	e.s.fileLimit = 1024
	sb := e.create(sandboxes.Spec{})
	base := "/v1/sandboxes/" + sb.ID
	big := bytes.Repeat([]byte("x"), 2048)
	wantErr(t, e.req("PUT", base+"/files/big", big), 413, sandboxes.CodeTooLarge, "1024")
	// Chunked: the server only finds out while reading.
	wantErr(t, e.req("PUT", base+"/files/big", io.MultiReader(bytes.NewReader(big))), 413, sandboxes.CodeTooLarge, "1024")
	wantErr(t, e.req("GET", base+"/files/big", nil), 404, sandboxes.CodeNotFound)
	want[sandboxes.FileInfo](t, e.req("PUT", base+"/files/fits", big[:1024]), 200)

	huge := `{"shell": "` + strings.Repeat("x", 2<<20) + `"}`
	wantErr(t, e.req("POST", base+"/exec", huge), 413, sandboxes.CodeTooLarge, "bytes")
}

func TestBadJSON(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(sandboxes.Spec{})
	for _, c := range []struct{ body, mention string }{
		{`{"argv": "ls"}`, "argv"},
		{`{"argv": ["ls"], "shel": "x"}`, "shel"},
		{`{"argv": [`, "JSON"},
		{`{"argv": ["ls"]} {"argv": ["ls"]}`, "more than one"},
		{`not json`, "JSON"},
		{`{"timeout": "forever"}`, "forever"},
		{`[]`, "ExecRequest"},
	} {
		wantErr(t, e.req("POST", "/v1/sandboxes/"+sb.ID+"/exec", c.body), 400, sandboxes.CodeBadRequest, c.mention)
	}
	wantErr(t, e.req("POST", "/v1/sandboxes", `{"ttl": 5}`), 400, sandboxes.CodeBadRequest, "ttl")
}

func TestRoutingErrorsAreJSON(t *testing.T) {
	e := newEnv(t, nil)
	wantErr(t, e.req("GET", "/nowhere", nil), 404, sandboxes.CodeNotFound, "openapi.json")
	wantErr(t, e.req("GET", "/v1/sandboxes/x/files", nil), 404, sandboxes.CodeNotFound)
	resp := e.req("PATCH", "/v1/sandboxes", nil)
	wantErr(t, resp, 405, sandboxes.CodeBadRequest, "PATCH")
	if resp.Header.Get("Allow") == "" {
		t.Error("405 without an Allow header")
	}
}

func TestAuth(t *testing.T) {
	e := newEnv(t, nil)
	for _, auth := range []string{"", "Bearer wrong", "Basic " + testToken, "Bearer " + testToken + "x"} {
		req, _ := http.NewRequest("GET", e.url+"/v1/sandboxes", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := e.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		wantErr(t, resp, 401, sandboxes.CodeAuth, "token")
		resp.Body.Close()
	}
	// Without a token, TCP is refused outright.
	s, err := New(Options{Manager: managertest.New(t, sandboxes.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := s.ListenTCP("127.0.0.1:0"); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("ListenTCP without a token: %v", err)
		if l != nil {
			l.Close()
		}
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(tl); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("Serve on TCP without a token: %v", err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, resp, 401, sandboxes.CodeAuth, "unix socket")
	if _, err := New(Options{}); err == nil {
		t.Error("New without a manager did not fail")
	}
}

func TestServeTCP(t *testing.T) {
	fake := managertest.New(t, sandboxes.Options{})
	s, _ := New(Options{Manager: fake, Token: testToken})
	l, err := s.ListenTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- s.Serve(l) }()
	e := &env{t: t, s: s, fake: fake, url: "http://" + l.Addr().String(), c: &http.Client{}}
	want[Health](t, e.req("GET", "/v1/health", nil), 200)
	resp, err := http.Get(e.url + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, resp, 401, sandboxes.CodeAuth)
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("Serve after Shutdown: %v", err)
	}
}

// shortTemp is a directory with a short path, for unix sockets.
func shortTemp(t *testing.T) string {
	d, err := os.MkdirTemp("", "as")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
}

func TestUnixSocket(t *testing.T) {
	dir := shortTemp(t)
	sock := filepath.Join(dir, "api.sock")
	fake := managertest.New(t, sandboxes.Options{})
	s, _ := New(Options{Manager: fake}) // no token: the socket is the auth
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	fi, _ := os.Stat(sock)
	if fi == nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("socket: %v", fi)
	}
	c := unixClient(sock)
	resp, err := c.Get("http://sandbox/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	want[Health](t, resp, 200)
	resp, err = c.Post("http://sandbox/v1/sandboxes", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	want[sandboxes.Info](t, resp, 201)

	// A live socket is not taken over.
	if _, err := ListenUnix(sock); err == nil || !strings.Contains(err.Error(), "another server") {
		t.Errorf("ListenUnix on a live socket: %v", err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("Serve on the unix socket after Shutdown: %v", err)
	}
	if _, err := os.Lstat(sock); err == nil {
		t.Error("the socket is still there after Shutdown")
	}

	// A file that is not a socket is never replaced.
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, []byte("keep me"), 0o600)
	if _, err := ListenUnix(plain); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("ListenUnix on a regular file: %v", err)
	}
	if b, _ := os.ReadFile(plain); string(b) != "keep me" {
		t.Error("ListenUnix changed a regular file")
	}
	// A stale socket (nobody answers) is replaced.
	stale := filepath.Join(dir, "stale.sock")
	l, err = net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	l2, err := ListenUnix(stale)
	if err != nil {
		t.Fatalf("ListenUnix on a stale socket: %v", err)
	}
	l2.Close()
}

func TestConcurrencyLimit(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxConcurrentPerClient = 2 })
	sb := e.create(sandboxes.Spec{})
	var streams []*http.Response
	for range 2 {
		resp := e.req("POST", "/v1/sandboxes/"+sb.ID+"/exec", sandboxes.ExecRequest{Shell: "echo up; sleep 30"})
		br := bufio.NewReader(resp.Body)
		if _, err := br.ReadString('\n'); err != nil { // started: the request is in flight
			t.Fatal(err)
		}
		streams = append(streams, resp)
	}
	wantErr(t, e.req("GET", "/v1/sandboxes", nil), 429, sandboxes.CodeLimit, "in flight")
	want[Health](t, e.req("GET", "/v1/health", nil), 200) // not counted
	for _, r := range streams {
		r.Body.Close()
	}
	// The slots come back once the streams end (the client went away, so
	// the commands are killed).
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := e.req("GET", "/v1/sandboxes", nil)
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d after the streams ended", resp.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestShutdownDrains(t *testing.T) {
	dir := shortTemp(t)
	sock := filepath.Join(dir, "api.sock")
	fake := managertest.New(t, sandboxes.Options{})
	s, _ := New(Options{Manager: fake})
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	c := unixClient(sock)
	resp, err := c.Post("http://sandbox/v1/sandboxes", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	sb := want[sandboxes.Info](t, resp, 201)
	resp, err = c.Post("http://sandbox/v1/sandboxes/"+sb.ID+"/exec", "application/json", strings.NewReader(`{"shell": "echo up; sleep 0.5; echo drained"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	shut := make(chan error)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	rest, _ := io.ReadAll(br)
	if !bytes.Contains(rest, []byte(`"drained\n"`)) || !bytes.Contains(rest, []byte(`"exitCode":0`)) {
		t.Errorf("the exec in flight did not finish: %s", rest)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if fake.Closed() != 1 {
		t.Errorf("manager closed %d times, want 1", fake.Closed())
	}
	if _, err := c.Get("http://sandbox/v1/health"); err == nil {
		t.Error("the server still answers after Shutdown")
	}
	// Through the handler alone, a closing server answers 503.
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/health", nil))
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "server_stopping") {
		t.Errorf("after Shutdown: %d %s", rec.Code, rec.Body)
	}
}

// TestShutdownDeadline: a request that outlives Shutdown's context is cut,
// and the manager is closed all the same.
func TestShutdownDeadline(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(sandboxes.Spec{})
	resp := e.req("POST", "/v1/sandboxes/"+sb.ID+"/exec", sandboxes.ExecRequest{Shell: "echo up; sleep 30"})
	bufio.NewReader(resp.Body).ReadString('\n')
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := e.s.Shutdown(ctx); err == nil {
		t.Error("Shutdown past its deadline returned nil")
	}
	if e.fake.Closed() != 1 {
		t.Errorf("manager closed %d times, want 1", e.fake.Closed())
	}
}

type panicky struct{ *managertest.Manager }

func (panicky) Get(context.Context, string) (sandboxes.Info, error) { panic("boom") }

func TestRecover(t *testing.T) {
	var logged bytes.Buffer
	e := newEnv(t, nil)
	s, _ := New(Options{Manager: panicky{e.fake}, Token: testToken, Logf: func(f string, a ...any) { fmt.Fprintf(&logged, f, a...) }})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	e.url = ts.URL
	wantErr(t, e.req("GET", "/v1/sandboxes/x", nil), 500, sandboxes.CodeInternal, "report")
	if !strings.Contains(logged.String(), "boom") {
		t.Errorf("the panic was not logged: %q", logged.String())
	}
}

func TestStatus(t *testing.T) {
	for code, status := range map[sandboxes.Code]int{
		sandboxes.CodeBadRequest: 400, sandboxes.CodeAuth: 401, sandboxes.CodeDenied: 403, sandboxes.CodeNotFound: 404,
		sandboxes.CodeConflict: 409, sandboxes.CodeTooLarge: 413, sandboxes.CodeLimit: 429, sandboxes.CodeInternal: 500,
		sandboxes.CodeUnsupport: 501, sandboxes.CodeStopped: 503, sandboxes.CodeTimeout: 408, "made_up": 500,
	} {
		if got := Status(code); got != status {
			t.Errorf("Status(%q) = %d, want %d", code, got, status)
		}
	}
	b := errorBody(&sandboxes.Error{Code: sandboxes.CodeDenied, Message: "no", Decision: "d-1"})
	if j, _ := json.Marshal(b); string(j) != `{"error":{"code":"policy_denied","message":"no","decision":"d-1"}}` {
		t.Errorf("error body %s", j)
	}
}

// TestUnixPeer: a unix connection's identity is its peer's uid, found
// with SO_PEERCRED.
func TestUnixPeer(t *testing.T) {
	s, _ := New(Options{Manager: managertest.New(t, sandboxes.Options{})})
	l, err := ListenUnix(filepath.Join(shortTemp(t), "p.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := net.Dial("unix", l.Addr().String())
		if err == nil {
			defer c.Close()
			time.Sleep(time.Second)
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := httptest.NewRequest("GET", "/v1/sandboxes", nil).WithContext(s.connContext(context.Background(), c))
	id, err := s.authenticate(r)
	if err != nil || id.Name != fmt.Sprintf("uid-%d", os.Getuid()) || id.Admin != (os.Getuid() == 0) {
		t.Errorf("identity %+v, %v; want uid-%d, an admin only for uid 0", id, err, os.Getuid())
	}
}

// TestExecStartedBeforeOutput: a silent command's stream answers at once,
// with its started event, not at its first byte of output or its end.
func TestExecStartedBeforeOutput(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(sandboxes.Spec{})
	start := time.Now()
	resp := e.req("POST", "/v1/sandboxes/"+sb.ID+"/exec", sandboxes.ExecRequest{Shell: "sleep 5; echo late"})
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var ev sandboxes.ExecEvent
	if err := json.Unmarshal(line, &ev); err != nil || ev.Type != sandboxes.EventStarted {
		t.Fatalf("first line %q (%v), want a started event", line, err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the started event came after %v, with the command's sleep", took)
	}
}
