package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// TestStdinRoutes: a background cat started with stdinOpen reads what is
// written to its stdin route and exits 0 once it is closed; writes to an
// exec without an open stdin, past the close, over the bound or to
// another sandbox's exec are refused.
func TestStdinRoutes(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(sandboxes.Spec{})
	other := e.create(sandboxes.Spec{})
	base := "/v1/sandboxes/" + sb.ID
	wantErr(t, e.req("POST", base+"/exec", `{"argv": ["cat"], "stdin": "x", "stdinOpen": true, "background": true}`), 400, sandboxes.CodeBadRequest, "not both")
	info := want[sandboxes.ExecInfo](t, e.req("POST", base+"/exec", sandboxes.ExecRequest{Argv: []string{"cat"}, StdinOpen: true, Background: true}), 202)
	if !info.Request.StdinOpen {
		t.Errorf("the exec's request does not say stdinOpen: %+v", info.Request)
	}
	stdin := base + "/execs/" + info.ID + "/stdin"
	for _, part := range []string{"hello ", "world\n"} {
		if resp := e.req("POST", stdin, part); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("write %q: status %d", part, resp.StatusCode)
		}
	}
	wantErr(t, e.req("POST", stdin, strings.Repeat("x", sandboxes.MaxStdinWrite+1)), 413, sandboxes.CodeTooLarge, "pieces")
	wantErr(t, e.req("POST", "/v1/sandboxes/"+other.ID+"/execs/"+info.ID+"/stdin", "x"), 404, sandboxes.CodeNotFound, info.ID)
	if resp := e.req("POST", stdin+"/close", nil); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("close: status %d", resp.StatusCode)
	}
	wantErr(t, e.req("POST", stdin, "late"), 409, sandboxes.CodeConflict, "closed")
	ev := want[sandboxes.ExecEvent](t, e.req("POST", base+"/execs/"+info.ID+"/wait", nil), 200)
	if ev.Type != sandboxes.EventExit || ev.Exit == nil || ev.Exit.ExitCode != 0 {
		t.Fatalf("cat did not exit 0 once its stdin was closed: %+v", ev)
	}
	var out strings.Builder
	resp := e.req("GET", base+"/execs/"+info.ID+"/output", nil)
	for _, ev := range events(t, resp) {
		out.WriteString(ev.Text)
	}
	if out.String() != "hello world\n" {
		t.Errorf("cat wrote %q, want what was written to its stdin", out.String())
	}
	wantErr(t, e.req("POST", stdin, "x"), 409, sandboxes.CodeConflict, "closed")
	// An exec without stdinOpen has no stdin to write to.
	done := want[sandboxes.ExecInfo](t, e.req("POST", base+"/exec", sandboxes.ExecRequest{Argv: []string{"sleep", "30"}, Background: true}), 202)
	wantErr(t, e.req("POST", base+"/execs/"+done.ID+"/stdin", "x"), 409, sandboxes.CodeConflict, "stdinOpen")
	wantErr(t, e.req("POST", base+"/execs/"+done.ID+"/stdin/close", nil), 409, sandboxes.CodeConflict, "stdinOpen")
	// A resize: of an exec without a pty, or to no size, is refused.
	wantErr(t, e.req("POST", base+"/execs/"+done.ID+"/pty", sandboxes.PTYSize{Cols: 100, Rows: 30}), 409, sandboxes.CodeConflict, "pty")
	wantErr(t, e.req("POST", base+"/execs/"+done.ID+"/pty", sandboxes.PTYSize{Cols: 0, Rows: 30}), 400, sandboxes.CodeBadRequest, "4096")
}
