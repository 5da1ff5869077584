//go:build linux

package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/agentsandbox/agentsandbox/guest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// syncBuffer is a console that tests can read while RunJob writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// selfJob is a job that runs as the test's own user, so no root is needed.
func selfJob(t *testing.T, command ...string) guest.Job {
	t.Helper()
	return guest.Job{
		Version: guest.ProtocolVersion,
		Step:    "test",
		Command: command,
		Env:     []string{"PATH=/usr/bin:/bin"},
		Workdir: "/",
		UID:     os.Getuid(),
		GID:     os.Getgid(),
	}
}

func writeJob(t *testing.T, job any) string {
	t.Helper()
	dir := t.TempDir()
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, guest.JobFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// run runs job and checks that result.json holds what RunJob returned.
func run(t *testing.T, ctx context.Context, job any) (guest.Result, string, *syncBuffer) {
	t.Helper()
	dir := writeJob(t, job)
	console := &syncBuffer{}
	res, err := RunJob(ctx, dir, console)
	if err != nil {
		t.Fatalf("RunJob: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, guest.ResultFile))
	if err != nil {
		t.Fatalf("read result: %v", err)
	}
	var onDisk guest.Result
	if err := json.Unmarshal(b, &onDisk); err != nil {
		t.Fatalf("decode result.json: %v", err)
	}
	if !onDisk.Started.Equal(res.Started) || !onDisk.Finished.Equal(res.Finished) {
		t.Errorf("result.json times %v..%v, returned %v..%v", onDisk.Started, onDisk.Finished, res.Started, res.Finished)
	}
	onDisk.Started, onDisk.Finished = res.Started, res.Finished
	if onDisk != res {
		t.Errorf("result.json = %+v, RunJob returned %+v", onDisk, res)
	}
	if res.Version != guest.ProtocolVersion {
		t.Errorf("result version %d", res.Version)
	}
	if res.Finished.Before(res.Started) {
		t.Errorf("finished %v before started %v", res.Finished, res.Started)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("leftover temp file %s in control dir", e.Name())
		}
	}
	return res, dir, console
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRunJobExitCodeAndLogs(t *testing.T) {
	job := selfJob(t, "sh", "-c", "echo out1; echo err1 >&2; printf 'no newline'; exit 3")
	res, dir, console := run(t, context.Background(), job)
	if res.ExitCode != 3 || res.Signal != "" || res.TimedOut || res.Error != "" {
		t.Fatalf("result %+v, want exit 3 and nothing else", res)
	}
	if res.Succeeded() {
		t.Error("Succeeded() true for exit 3")
	}
	if got := readFile(t, filepath.Join(dir, guest.StdoutFile)); got != "out1\nno newline" {
		t.Errorf("stdout.log = %q", got)
	}
	if got := readFile(t, filepath.Join(dir, guest.StderrFile)); got != "err1\n" {
		t.Errorf("stderr.log = %q", got)
	}
	c := console.String()
	for _, want := range []string{"out1\n", "err1\n", "no newline"} {
		if !strings.Contains(c, want) {
			t.Errorf("console %q lacks %q", c, want)
		}
	}
	if res.Step != "test" {
		t.Errorf("step %q", res.Step)
	}
}

func TestRunJobSuccess(t *testing.T) {
	res, _, _ := run(t, context.Background(), selfJob(t, "true"))
	if !res.Succeeded() || res.ExitCode != 0 {
		t.Fatalf("result %+v, want success", res)
	}
}

func TestRunJobSignal(t *testing.T) {
	res, _, _ := run(t, context.Background(), selfJob(t, "sh", "-c", "kill -USR1 $$"))
	if res.Signal != "SIGUSR1" || res.ExitCode != -1 || res.TimedOut || res.Error != "" {
		t.Fatalf("result %+v, want SIGUSR1", res)
	}
}

func TestRunJobTimeout(t *testing.T) {
	job := selfJob(t, "sleep", "30")
	job.TimeoutMS = 100
	res, _, _ := run(t, context.Background(), job)
	if !res.TimedOut || res.Signal != "SIGTERM" || res.ExitCode != -1 {
		t.Fatalf("result %+v, want timed out by SIGTERM", res)
	}
}

func TestRunJobTimeoutIgnoringTERM(t *testing.T) {
	job := selfJob(t, "sh", "-c", `trap "" TERM; sleep 30 & wait; sleep 30`)
	job.TimeoutMS = 100
	res, _, _ := run(t, context.Background(), job)
	if !res.TimedOut || res.Signal != "SIGKILL" {
		t.Fatalf("result %+v, want timed out by SIGKILL after the grace", res)
	}
	if d := res.Duration(); d < guest.KillGrace {
		t.Errorf("killed after %v, before the grace of %v", d, guest.KillGrace)
	}
}

func TestRunJobCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	res, _, _ := run(t, ctx, selfJob(t, "sleep", "30"))
	if res.Signal != "SIGTERM" || !strings.Contains(res.Error, "context canceled") || res.TimedOut {
		t.Fatalf("result %+v, want SIGTERM and a cancellation error", res)
	}
}

func TestRunJobEnvIsExact(t *testing.T) {
	t.Setenv("AGENTSANDBOX_LEAK", "must not reach the job")
	job := selfJob(t, "/usr/bin/env")
	job.Env = []string{"A=1", "B=two words", "EMPTY="}
	res, dir, _ := run(t, context.Background(), job)
	if !res.Succeeded() {
		t.Fatalf("result %+v", res)
	}
	if got, want := readFile(t, filepath.Join(dir, guest.StdoutFile)), "A=1\nB=two words\nEMPTY=\n"; got != want {
		t.Errorf("job env:\n%s\nwant exactly:\n%s", got, want)
	}
}

func TestRunJobEmptyEnv(t *testing.T) {
	job := selfJob(t, "/usr/bin/env")
	job.Env = nil
	res, dir, _ := run(t, context.Background(), job)
	if !res.Succeeded() {
		t.Fatalf("result %+v", res)
	}
	if got := readFile(t, filepath.Join(dir, guest.StdoutFile)); got != "" {
		t.Errorf("job env = %q, want empty", got)
	}
}

func TestRunJobWorkdir(t *testing.T) {
	wd, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	job := selfJob(t, "/bin/pwd", "-P")
	job.Workdir = wd
	res, dir, _ := run(t, context.Background(), job)
	if !res.Succeeded() {
		t.Fatalf("result %+v", res)
	}
	if got := readFile(t, filepath.Join(dir, guest.StdoutFile)); got != wd+"\n" {
		t.Errorf("pwd = %q, want %q", got, wd)
	}
}

func TestRunJobRusage(t *testing.T) {
	// Burn a little CPU and memory in the job itself.
	job := selfJob(t, "sh", "-c", `i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done`)
	res, _, _ := run(t, context.Background(), job)
	if !res.Succeeded() {
		t.Fatalf("result %+v", res)
	}
	if res.Rusage.MaxRSSKiB <= 0 || res.Rusage.UserMS+res.Rusage.SystemMS <= 0 {
		t.Errorf("rusage %+v, want some CPU time and a max RSS", res.Rusage)
	}
}

// A job that leaves a process behind in its group still ends when its main
// process does, and the leftover does not keep the agent reading the pipes.
func TestRunJobLeftoverChildren(t *testing.T) {
	res, _, _ := run(t, context.Background(), selfJob(t, "sh", "-c", "sleep 300 & echo started"))
	if !res.Succeeded() {
		t.Fatalf("result %+v", res)
	}
}

func TestRunJobUnstartable(t *testing.T) {
	for _, tc := range []struct {
		name string
		job  func(guest.Job) any
		want string
	}{
		{"missing binary", func(j guest.Job) any { j.Command = []string{"/nonexistent/prog"}; return j }, "no such file"},
		{"not in PATH", func(j guest.Job) any { j.Command = []string{"no-such-command-xyz"}; return j }, "not found"},
		{"no PATH", func(j guest.Job) any { j.Env = nil; j.Command = []string{"sh"}; return j }, "has no PATH"},
		{"missing workdir", func(j guest.Job) any { j.Workdir = "/nonexistent-dir"; return j }, "no such file"},
		{"relative workdir", func(j guest.Job) any { j.Workdir = "tmp"; return j }, "not an absolute path"},
		{"wrong version", func(j guest.Job) any { j.Version = guest.ProtocolVersion + 1; return j }, "protocol version"},
		{"empty command", func(j guest.Job) any { j.Command = nil; return j }, "command is empty"},
		{"bad env", func(j guest.Job) any { j.Env = []string{"NOEQUALS"}; return j }, "not KEY=VALUE"},
		{"duplicate env", func(j guest.Job) any { j.Env = []string{"A=1", "A=2"}; return j }, "appears twice"},
		{"unknown field", func(j guest.Job) any {
			return map[string]any{"version": guest.ProtocolVersion, "command": []string{"true"}, "workdir": "/", "comand": 1}
		}, "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, _, _ := run(t, context.Background(), tc.job(selfJob(t, "true")))
			if res.ExitCode != -1 || !strings.Contains(res.Error, tc.want) {
				t.Fatalf("result %+v, want exit -1 and an error containing %q", res, tc.want)
			}
			if res.Succeeded() {
				t.Error("Succeeded() true")
			}
		})
	}
}

func TestRunJobMissingJobFile(t *testing.T) {
	dir := t.TempDir()
	res, err := RunJob(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Error, "read job") {
		t.Errorf("error %q", res.Error)
	}
	if _, err := os.Stat(filepath.Join(dir, guest.ResultFile)); err != nil {
		t.Errorf("no result written: %v", err)
	}
}

func TestRunJobResultUnwritable(t *testing.T) {
	_, err := RunJob(context.Background(), filepath.Join(t.TempDir(), "missing"), nil)
	if err == nil {
		t.Fatal("RunJob returned nil error although result.json could not be written")
	}
}

// As root the agent switches to the job's uid and gid and drops every
// supplementary group.
func TestRunJobCredentialAsRoot(t *testing.T) {
	testtier.Root(t)
	job := selfJob(t, "sh", "-c", "id -u; id -g; id -G")
	job.UID, job.GID = guest.DefaultUID, guest.DefaultGID
	res, dir, _ := run(t, context.Background(), job)
	if !res.Succeeded() {
		t.Fatalf("result %+v", res)
	}
	if got, want := readFile(t, filepath.Join(dir, guest.StdoutFile)), "65534\n65534\n65534\n"; got != want {
		t.Errorf("id output %q, want %q", got, want)
	}
}
