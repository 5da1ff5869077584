package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server"
)

const sandboxTestToken = "sandbox-cli-test-token-0123456789"

// fakeServe serves the real manager on the fake backend (it isolates
// nothing: commands run here, in a temporary directory per sandbox) on a
// unix socket and on TCP with a token; it returns the socket and the URL.
func fakeServe(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := server.New(server.Options{Manager: managertest.New(t, sandboxes.Options{}), Token: sandboxTestToken, Version: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "as.sock")
	l, err := server.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fake server's socket: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return sock, ts.URL
}

// cli runs the CLI in-process with stdin and returns its exit status,
// stdout and stderr.
func cli(t *testing.T, stdin string, out io.Writer, args ...string) (int, string, string) {
	t.Helper()
	var o, e bytes.Buffer
	if out == nil {
		out = &o
	}
	code := Execute(context.Background(), Stdio{In: strings.NewReader(stdin), Out: out, Err: &e}, args)
	return code, o.String(), e.String()
}

func TestSandboxCLIFake(t *testing.T) {
	t.Setenv("AGENTSANDBOX_URL", "")
	sock, _ := fakeServe(t)
	t.Setenv("AGENTSANDBOX_SOCKET", sock)
	dir := t.TempDir()

	code, out, errs := cli(t, "", nil, "sandbox", "create", "--label", "project=demo", "--label", "owner=me", "--ttl", "30m", "--env", "GREETING=hi")
	if code != 0 {
		t.Fatalf("create: exit %d: %s", code, errs)
	}
	id := strings.TrimSpace(out)
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) {
		t.Fatalf("create printed %q, want a sandbox id", out)
	}
	if _, _, errs := cli(t, "", nil, "sandbox", "create", "--label", "project=other"); errs != "" {
		t.Fatal(errs)
	}

	code, out, _ = cli(t, "", nil, "sandbox", "ls", "--label", "project=demo")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") || !strings.HasPrefix(lines[1], id+" ") ||
		!strings.Contains(lines[1], "owner=me,project=demo") || !strings.Contains(lines[1], "running") {
		t.Errorf("ls --label project=demo: exit %d:\n%s", code, out)
	}
	if _, out, _ = cli(t, "", nil, "sandbox", "ls"); strings.Count(out, "\n") != 3 {
		t.Errorf("ls: want a header and two sandboxes:\n%s", out)
	}

	// Exec: output, the command's exit status, stdin, cwd, env.
	code, out, errs = cli(t, "", nil, "sandbox", "exec", id, "--", "sh", "-c", "echo out; echo err >&2; echo $GREETING; exit 7")
	if code != 7 || out != "out\nhi\n" || errs != "err\n" {
		t.Errorf("exec: exit %d, stdout %q, stderr %q; want 7, \"out\\nhi\\n\", \"err\\n\"", code, out, errs)
	}
	code, out, errs = cli(t, "a\nb\nc\n", nil, "sandbox", "exec", "-i", id, "--", "wc", "-l")
	if code != 0 || strings.TrimSpace(out) != "3" {
		t.Errorf("exec -i wc -l: exit %d, %q %q", code, out, errs)
	}
	cli(t, "", nil, "sandbox", "exec", id, "--", "mkdir", "sub")
	code, out, _ = cli(t, "", nil, "sandbox", "exec", "--cwd", "sub", "--env", "X=1", id, "--", "sh", "-c", "basename $PWD; echo $X")
	if code != 0 || out != "sub\n1\n" {
		t.Errorf("exec --cwd sub --env X=1: exit %d, %q", code, out)
	}
	code, _, errs = cli(t, "", nil, "sandbox", "exec", id, "--", "sh", "-c", "kill -TERM $$")
	if code != 128+int(syscall.SIGTERM) || !strings.Contains(errs, "SIGTERM") {
		t.Errorf("exec of a command that SIGTERM ends: exit %d, %q; want 143 and the signal named", code, errs)
	}
	code, _, errs = cli(t, "", nil, "sandbox", "exec", "--timeout", "200ms", id, "--", "sleep", "30")
	// The agent ends a command past its timeout with SIGTERM, then SIGKILL
	// if it lingers.
	if code != 128+int(syscall.SIGTERM) && code != 128+int(syscall.SIGKILL) && code != ExitStepFailed || !strings.Contains(errs, "timed out") {
		t.Errorf("exec --timeout: exit %d, %q; want 143, 137 or 1 and a message", code, errs)
	}

	// cp in keeps the mode; cp out to a directory, a file and stdout.
	script := filepath.Join(dir, "run.sh")
	os.WriteFile(script, []byte("#!/bin/sh\necho ran > result.txt\n"), 0o755)
	if code, _, errs := cli(t, "", nil, "sandbox", "cp", script, id+":bin/"); code != 0 {
		t.Fatalf("cp in: exit %d: %s", code, errs)
	}
	if code, _, errs := cli(t, "", nil, "sandbox", "exec", id, "--", "./bin/run.sh"); code != 0 {
		t.Fatalf("exec the copied script: exit %d: %s", code, errs)
	}
	if code, _, errs := cli(t, "", nil, "sandbox", "cp", id+":result.txt", dir); code != 0 {
		t.Fatalf("cp out: exit %d: %s", code, errs)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "result.txt")); string(b) != "ran\n" {
		t.Errorf("cp out wrote %q", b)
	}
	if code, out, _ := cli(t, "", nil, "sandbox", "cp", id+":result.txt", "-"); code != 0 || out != "ran\n" {
		t.Errorf("cp out to -: exit %d, %q", code, out)
	}
	if code, _, _ := cli(t, "from stdin", nil, "sandbox", "cp", "-", id+":in.txt"); code != 0 {
		t.Errorf("cp - in: exit %d", code)
	}

	code, out, _ = cli(t, "", nil, "sandbox", "files", id)
	for _, want := range []string{"drwxr-xr-x", " bin/", " result.txt", " in.txt", " sub/"} {
		if !strings.Contains(out, want) {
			t.Errorf("files: no %q in:\n%s", want, out)
		}
	}
	if code, out, _ = cli(t, "", nil, "sandbox", "files", id, "bin"); code != 0 || !regexp.MustCompile(`(?m)^ *-rwxr-xr-x +32 .* run\.sh$`).MatchString(out) {
		t.Errorf("files bin: exit %d:\n%s", code, out)
	}

	// Errors: the server's message, its exit status.
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"sandbox", "exec", "sb-000000000000", "--", "true"}, ExitInfra, "sb-000000000000"},
		{[]string{"sandbox", "cp", id + ":missing.txt", dir}, ExitInfra, "missing.txt"},
		{[]string{"sandbox", "exec", id, "--", "no-such-command-agentsandbox"}, ExitInfra, "no-such-command-agentsandbox"},
		{[]string{"sandbox", "exec", id, "true"}, ExitInvalid, "put -- between"},
		{[]string{"sandbox", "exec", "--timeout", "x", id, "--", "true"}, ExitInvalid, "invalid argument"},
		{[]string{"sandbox", "cp", "a", "b"}, ExitInvalid, "ID:PATH"},
		{[]string{"sandbox", "cp", dir, id + ":d"}, ExitInvalid, "not a regular file"},
		{[]string{"sandbox", "create", "--label", "novalue"}, ExitInvalid, "KEY=VALUE"},
		{[]string{"sandbox", "exec", "-i", id, "--", "cat"}, ExitInvalid, "sandbox cp"}, // stdin over the limit
		{[]string{"sandbox", "create", "--isolation", "bogus"}, ExitInvalid, "bogus"},
		{[]string{"sandbox", "files", id, "../etc"}, ExitInvalid, ".."},
		{[]string{"sandbox", "ls", "--socket", filepath.Join(dir, "none.sock")}, ExitInfra, "agentsandbox serve"},
		{[]string{"sandbox", "ls", "--url", "http://127.0.0.1:1"}, ExitInvalid, "AGENTSANDBOX_TOKEN"},
	} {
		stdin := ""
		if c.args[1] == "exec" && c.args[2] == "-i" {
			stdin = strings.Repeat("x", maxExecStdin+1)
		}
		code, _, errs := cli(t, stdin, nil, c.args...)
		if code != c.code || !strings.Contains(errs, c.msg) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", strings.Join(c.args, " "), code, errs, c.code, c.msg)
		}
	}

	code, out, errs = cli(t, "", nil, "sandbox", "rm", id, "sb-000000000000")
	if code != ExitInfra || !regexp.MustCompile(`^[0-9a-z]{32,64}\n$`).MatchString(out) || !strings.Contains(errs, "sb-000000000000") {
		t.Errorf("rm ID missing: exit %d, stdout %q, stderr %q; want 5, the record id, the missing one named", code, out, errs)
	}
	if code, _, errs := cli(t, "", nil, "sandbox", "exec", id, "--", "true"); code != ExitInfra || errs == "" {
		t.Errorf("exec in a killed sandbox: exit %d, %q", code, errs)
	}
	if _, out, _ := cli(t, "", nil, "sandbox", "ls", "--label", "project=demo"); !strings.Contains(out, "stopped (killed)") {
		t.Errorf("ls after rm:\n%s", out)
	}
}

// TestSandboxCLIExecStreams checks that exec writes output as it comes:
// the command waits for a file that is copied in only once its first
// line has been written here.
func TestSandboxCLIExecStreams(t *testing.T) {
	t.Setenv("AGENTSANDBOX_URL", "")
	sock, _ := fakeServe(t)
	t.Setenv("AGENTSANDBOX_SOCKET", sock)
	_, out, _ := cli(t, "", nil, "sandbox", "create")
	id := strings.TrimSpace(out)
	w := &onWrite{f: func(seen string) {
		if strings.Contains(seen, "ready") {
			if code, _, errs := cli(t, "", nil, "sandbox", "cp", "-", id+":go"); code != 0 {
				t.Errorf("cp go: %s", errs)
			}
		}
	}}
	code, _, errs := cli(t, "", w, "sandbox", "exec", "--timeout", "20s", id, "--", "sh", "-c",
		"echo ready; while [ ! -e go ]; do sleep 0.05; done; echo done")
	if code != 0 || w.buf.String() != "ready\ndone\n" {
		t.Errorf("exec: exit %d, stdout %q, stderr %q: the output was not streamed while the command ran", code, w.buf.String(), errs)
	}
}

// onWrite calls f once with what was written so far, on the first write.
type onWrite struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	f    func(string)
	done bool
}

func (w *onWrite) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	s, call := w.buf.String(), !w.done
	w.done = true
	w.mu.Unlock()
	if call {
		w.f(s)
	}
	return len(p), nil
}

func TestSandboxCLITCP(t *testing.T) {
	t.Setenv("AGENTSANDBOX_SOCKET", "")
	t.Setenv("AGENTSANDBOX_TOKEN", "")
	_, url := fakeServe(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte(sandboxTestToken+"\n"), 0o600)
	code, out, errs := cli(t, "", nil, "sandbox", "create", "--url", url, "--token-file", tokenFile)
	if code != 0 {
		t.Fatalf("create over TCP: exit %d: %s", code, errs)
	}
	id := strings.TrimSpace(out)
	t.Setenv("AGENTSANDBOX_URL", url)
	t.Setenv("AGENTSANDBOX_TOKEN", sandboxTestToken)
	if code, out, errs := cli(t, "", nil, "sandbox", "exec", id, "--", "echo", "tcp"); code != 0 || out != "tcp\n" {
		t.Errorf("exec with $AGENTSANDBOX_URL and $AGENTSANDBOX_TOKEN: exit %d, %q, %q", code, out, errs)
	}
	t.Setenv("AGENTSANDBOX_TOKEN", "wrong-token-wrong-token")
	if code, _, errs := cli(t, "", nil, "sandbox", "ls"); code != ExitInfra || !strings.Contains(errs, "token") {
		t.Errorf("ls with a wrong token: exit %d, %q", code, errs)
	}
}

// TestSandboxCLIServe drives the real `agentsandbox serve` with the
// sandbox commands of the real binary: create, exec, cp both ways, files,
// rm; then the record verifies and serve exits 0 on SIGTERM.
func TestSandboxCLIServe(t *testing.T) {
	testtier.Root(t)
	dir := t.TempDir()
	bin := buildCLI(t, dir)
	state := filepath.Join(dir, "state")
	sock := filepath.Join(dir, "serve.sock")
	serve := exec.Command(bin, "serve", "--state-dir", state, "--socket", sock)
	var serveLog bytes.Buffer
	serve.Stdout, serve.Stderr = &serveLog, &serveLog
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	t.Cleanup(func() {
		serve.Process.Kill()
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not listen on %s within 60s: %v", sock, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	run := func(stdin string, args ...string) (int, string, string) {
		t.Helper()
		// The flag goes before the command's own arguments (and any --).
		args = append([]string{args[0], args[1], "--socket", sock}, args[2:]...)
		cmd := exec.Command(bin, args...)
		cmd.Stdin = strings.NewReader(stdin)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, o.String(), e.String()
	}
	code, out, errs := run("", "sandbox", "create", "--label", "test=cli")
	if code != 0 {
		t.Fatalf("create: exit %d: %s\n%s", code, errs, serveLog.String())
	}
	id := strings.TrimSpace(out)
	local := filepath.Join(dir, "in.sh")
	os.WriteFile(local, []byte("#!/bin/sh\necho \"$1\" > out.txt\necho warn >&2\nexit 3\n"), 0o755)
	if code, _, errs := run("", "sandbox", "cp", local, id+":in.sh"); code != 0 {
		t.Fatalf("cp in: exit %d: %s", code, errs)
	}
	if code, out, errs := run("", "sandbox", "exec", id, "--", "./in.sh", "hello"); code != 3 || out != "" || errs != "warn\n" {
		t.Errorf("exec: exit %d, %q, %q; want 3, \"\", \"warn\\n\"", code, out, errs)
	}
	if code, out, errs := run("x\ny\n", "sandbox", "exec", "-i", id, "--", "wc", "-l"); code != 0 || strings.TrimSpace(out) != "2" {
		t.Errorf("exec -i: exit %d, %q, %q", code, out, errs)
	}
	if code, _, errs := run("", "sandbox", "cp", id+":out.txt", dir); code != 0 {
		t.Errorf("cp out: exit %d: %s", code, errs)
	} else if b, _ := os.ReadFile(filepath.Join(dir, "out.txt")); string(b) != "hello\n" {
		t.Errorf("cp out wrote %q", b)
	}
	if code, out, _ := run("", "sandbox", "files", id); code != 0 || !strings.Contains(out, " in.sh") || !strings.Contains(out, " out.txt") {
		t.Errorf("files: exit %d:\n%s", code, out)
	}
	if code, out, _ := run("", "sandbox", "ls", "--label", "test=cli"); code != 0 || !strings.Contains(out, id) {
		t.Errorf("ls: exit %d:\n%s", code, out)
	}
	// Snapshot and restore: the workspace rolls back.
	code, out, errs = run("", "sandbox", "snapshot", id, "--label", "before rm")
	snap := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(snap, "sha256:") {
		t.Fatalf("snapshot: exit %d, %q, %s", code, out, errs)
	}
	if code, out, _ := run("", "sandbox", "snapshot", id, "--list"); code != 0 || !strings.Contains(out, snap) || !strings.Contains(out, "before rm") {
		t.Errorf("snapshot --list: exit %d:\n%s", code, out)
	}
	run("", "sandbox", "exec", id, "--", "rm", "out.txt")
	if code, _, errs := run("", "sandbox", "restore", id, snap); code != 0 {
		t.Errorf("restore: exit %d: %s", code, errs)
	}
	if code, out, _ := run("", "sandbox", "exec", id, "--", "cat", "out.txt"); code != 0 || out != "hello\n" {
		t.Errorf("after restore: exit %d, %q", code, out)
	}
	// Network: none to change here; one created with --allow shows and
	// changes its list.
	if code, _, errs := run("", "sandbox", "network", id, "--grant", "a.example.test:443"); code != ExitInfra || !strings.Contains(errs, "network.allow") {
		t.Errorf("network --grant without a network room: exit %d: %s", code, errs)
	}
	code, out, errs = run("", "sandbox", "create", "--allow", "a.example.test:443", "--bandwidth", "10Mbit")
	if code != 0 {
		t.Fatalf("create --allow: exit %d: %s", code, errs)
	}
	netID := strings.TrimSpace(out)
	if code, out, errs := run("", "sandbox", "network", netID, "--grant", "*.example.test:80", "--revoke", "a.example.test:443"); code != 0 || out != "allow: *.example.test:80\n" {
		t.Errorf("network --grant --revoke: exit %d, %q, %s", code, out, errs)
	}
	if code, _, errs := run("", "sandbox", "rm", netID); code != 0 {
		t.Errorf("rm: exit %d: %s", code, errs)
	}
	// A whole workflow run by the server.
	wf := filepath.Join(dir, "wf.yaml")
	os.WriteFile(wf, []byte("apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: via-serve\nsteps:\n  - name: one\n    isolation: namespace\n    run: echo one > one.txt\n    outputs: [one.txt]\n  - name: two\n    isolation: namespace\n    needs: [one]\n    run: exit 4\n"), 0o644)
	code, out, errs = run("", "sandbox", "run", wf)
	if code != ExitStepFailed || !strings.Contains(out, "one.txt") || !regexp.MustCompile(`two\s+failed\s+4`).MatchString(out) || !strings.Contains(out, "via-serve failed: record ") {
		t.Errorf("sandbox run: exit %d:\n%s\n%s", code, out, errs)
	}

	code, out, errs = run("", "sandbox", "rm", id)
	rec := strings.TrimSpace(out)
	if code != 0 || rec == "" {
		t.Fatalf("rm: exit %d, %q, %s", code, out, errs)
	}
	if out, err := exec.Command(bin, "records", "verify", rec, "--state-dir", state).CombinedOutput(); err != nil {
		t.Errorf("records verify %s: %v\n%s", rec, err, out)
	}
	serve.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("serve after SIGTERM: %v, want exit status 0\n%s", err, serveLog.String())
		}
	case <-time.After(90 * time.Second):
		t.Errorf("serve did not exit within 90s of SIGTERM\n%s", serveLog.String())
	}
}

// gapManager answers every exec with output that has a hole in it: a gap
// event, then an event past the bytes sent without one.
type gapManager struct{ *managertest.Manager }

func (gapManager) Exec(_ context.Context, id string, r sandboxes.ExecRequest, emit func(sandboxes.ExecEvent) error) (sandboxes.ExecInfo, error) {
	now := time.Now()
	for _, ev := range []sandboxes.ExecEvent{
		{Type: sandboxes.EventStdout, Text: "abc"},
		{Type: sandboxes.EventGap, Stream: sandboxes.EventStdout, Offset: 3, Next: 10},
		{Type: sandboxes.EventStdout, Offset: 10, Text: "xyz"},
		{Type: sandboxes.EventStderr, Offset: 4, Text: "late"},
		{Type: sandboxes.EventExit, Exit: &sandboxes.ExitStatus{}},
	} {
		ev.ExecID, ev.Time = "ex-1", now
		if err := emit(ev); err != nil {
			return sandboxes.ExecInfo{}, err
		}
	}
	return sandboxes.ExecInfo{ID: "ex-1"}, nil
}

// TestSandboxCLIExecGap: output the server did not send is never run
// together: the bytes around it are written, the gap is said on stderr
// with its offsets, and the exit status is 5 though the command exited 0.
func TestSandboxCLIExecGap(t *testing.T) {
	dir := t.TempDir()
	s, err := server.New(server.Options{Manager: gapManager{managertest.New(t, sandboxes.Options{})}})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "as.sock")
	l, err := server.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	t.Setenv("AGENTSANDBOX_URL", "")
	t.Setenv("AGENTSANDBOX_SOCKET", sock)
	code, out, errs := cli(t, "", nil, "sandbox", "exec", "sb-1", "--", "true")
	if code != ExitInfra || out != "abcxyz" {
		t.Errorf("exec with a gap: exit %d, stdout %q; want %d and the bytes around the gap", code, out, ExitInfra)
	}
	for _, want := range []string{"stdout bytes 3 to 10 (7 bytes) were lost", "stderr bytes 0 to 4 (4 bytes) were lost", "late", "output was lost"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr %q does not say %q", errs, want)
		}
	}
}
