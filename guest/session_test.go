package guest

import (
	"strings"
	"testing"
)

func TestSessionRequestCheck(t *testing.T) {
	ok := SessionRequest{Op: OpExec, Command: []string{"sh", "-c", "true"}, Env: []string{"A=1", "B="}, Workdir: "src"}
	if err := ok.Check(); err != nil {
		t.Fatalf("a good exec request: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*SessionRequest)
		want string
	}{
		{"no command", func(q *SessionRequest) { q.Command = nil }, "without a command"},
		{"empty argv0", func(q *SessionRequest) { q.Command = []string{""} }, "without a command"},
		{"NUL argument", func(q *SessionRequest) { q.Command = []string{"sh", "a\x00b"} }, "NUL byte"},
		{"env not KEY=VALUE", func(q *SessionRequest) { q.Env = []string{"NOEQUALS"} }, "not KEY=VALUE"},
		{"env key twice", func(q *SessionRequest) { q.Env = []string{"A=1", "A=2"} }, "appears twice"},
		{"NUL in env", func(q *SessionRequest) { q.Env = []string{"A=\x00"} }, "NUL byte"},
		{"NUL in workdir", func(q *SessionRequest) { q.Workdir = "a\x00" }, "NUL byte"},
		{"negative uid", func(q *SessionRequest) { q.UID = -1 }, "uid -1"},
		{"negative timeout", func(q *SessionRequest) { q.TimeoutMS = -5 }, "negative timeout"},
		{"unknown op", func(q *SessionRequest) { q.Op = "launch" }, "unknown session op"},
		{"stdin too big", func(q *SessionRequest) { q.Op, q.Data = OpStdin, make([]byte, MaxSessionChunk+1) }, "over"},
		{"signal without one", func(q *SessionRequest) { q.Op = OpSignal }, "without a signal"},
	} {
		q := ok
		tc.edit(&q)
		if err := q.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Check = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

func TestExecJobDefaults(t *testing.T) {
	session := Job{Version: ProtocolVersion, Step: "s", Session: true, Workdir: WorkspaceMount}
	for in, want := range map[string]string{
		"":          WorkspaceMount,
		"src":       WorkspaceMount + "/src",
		"a/../b/":   WorkspaceMount + "/b",
		"/tmp/x/..": "/tmp",
		"../etc":    "/etc",
	} {
		q := SessionRequest{Op: OpExec, Command: []string{"true"}, Env: []string{"PATH=/bin"}, Workdir: in, UID: 7, GID: 8, TimeoutMS: 9}
		j := q.ExecJob(session)
		if j.Workdir != want {
			t.Errorf("workdir %q: %q, want %q", in, j.Workdir, want)
		}
		if j.Step != "s" || j.UID != 7 || j.GID != 8 || j.TimeoutMS != 9 || j.Session || len(j.Env) != 1 {
			t.Errorf("workdir %q: job %+v", in, j)
		}
		if err := j.Validate(); err != nil {
			t.Errorf("workdir %q: the job of a checked request is invalid: %v", in, err)
		}
	}
}

func TestSessionJobHasNoTimeout(t *testing.T) {
	j := Job{Version: ProtocolVersion, Session: true, Workdir: "/", TimeoutMS: 1000}
	if err := j.Validate(); err == nil || !strings.Contains(err.Error(), "session job has no timeout") {
		t.Errorf("a session job with a timeout: %v", err)
	}
	j.TimeoutMS = 0
	if err := j.Validate(); err != nil {
		t.Errorf("a session job: %v", err)
	}
}
