package python_test

import (
	"context"
	"github.com/agentsandbox/agentsandbox/internal/serverproc"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// TestMain builds the sandbox agent for the root tier, where the real
// serve starts jails with it as their init.
func TestMain(m *testing.M) {
	os.Exit(testtier.MainWithAgent(m))
}

const testToken = "python-client-test-token-0123456789"

// python3 is the interpreter, or a skip (a failure in CI) without one.
func python3(t *testing.T) string {
	t.Helper()
	return testtier.Command(t, "python", "python3", "install python3 (scripts/setup.sh does)")
}

// runPython runs python3 args in clients/python with env added and
// fails the test with its output if it fails.
func runPython(t *testing.T, py string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, args...)
	cmd.Env = append(append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("python3 %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

var recordLine = regexp.MustCompile(`(?m)^record ([0-9a-z]{32,64})$`)

// TestPythonClientFake runs the client's tests and the example agent loop
// against fakeserve on a unix socket and on TCP with a token.
func TestPythonClientFake(t *testing.T) {
	py := python3(t)
	dir := t.TempDir()
	fake := serverproc.GoBuild(t, dir, "github.com/agentsandbox/agentsandbox/internal/fakesandboxes/fakeserve")
	sock := filepath.Join(dir, "as.sock")
	unix, _ := serverproc.Start(t, func(l string) bool { return strings.HasPrefix(l, "listening on unix") }, fake, "-socket", sock)
	tcp, line := serverproc.Start(t, func(l string) bool { return strings.HasPrefix(l, "listening on tcp") }, fake,
		"-tcp", "127.0.0.1:0", "-token", testToken)
	addr := strings.TrimPrefix(line, "listening on tcp ")

	runPython(t, py, []string{"AGENTSANDBOX_TEST_SOCKET=" + sock, "AGENTSANDBOX_TEST_URL=http://" + addr,
		"AGENTSANDBOX_TEST_TOKEN=" + testToken}, "-m", "unittest", "discover", "-v")
	out := runPython(t, py, []string{"AGENTSANDBOX_SOCKET=" + sock}, "examples/agent_loop.py")
	if !recordLine.MatchString(out) {
		t.Errorf("the agent loop printed no record id:\n%s", out)
	}
	for _, s := range []*serverproc.Proc{unix, tcp} {
		if logs, err := s.Stop(); err != nil {
			t.Errorf("fakeserve after SIGTERM: %v\n%s", err, logs)
		}
	}
}

// TestPythonClientServe runs the same tests and the agent loop against
// the real `agentsandbox serve`, whose sandboxes are namespace jails,
// then checks the loop's record verifies and that serve stops on
// SIGTERM with status 0.
func TestPythonClientServe(t *testing.T) {
	testtier.Root(t)
	py := python3(t)
	dir := t.TempDir()
	bin := serverproc.GoBuild(t, dir, "github.com/agentsandbox/agentsandbox/cmd/agentsandbox")
	state := filepath.Join(dir, "state")
	sock := filepath.Join(dir, "serve.sock")
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := serverproc.FreePort(t)
	srv, _ := serverproc.Start(t, func(l string) bool { return strings.HasPrefix(l, "serving on tcp") }, bin,
		"serve", "--state-dir", state, "--socket", sock, "--listen", addr, "--token-file", tokenFile)
	serverproc.WaitForSocket(t, sock)

	runPython(t, py, []string{"AGENTSANDBOX_TEST_SOCKET=" + sock, "AGENTSANDBOX_TEST_URL=http://" + addr,
		"AGENTSANDBOX_TEST_TOKEN=" + testToken}, "-m", "unittest", "discover", "-v")
	out := runPython(t, py, []string{"AGENTSANDBOX_SOCKET=" + sock}, "examples/agent_loop.py")
	m := recordLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the agent loop printed no record id:\n%s", out)
	}
	if out, err := exec.Command(bin, "records", "verify", m[1], "--state-dir", state).CombinedOutput(); err != nil {
		t.Errorf("records verify %s: %v\n%s", m[1], err, out)
	}
	if logs, err := srv.Stop(); err != nil {
		t.Errorf("serve after SIGTERM: %v (want exit status 0)\n%s", err, logs)
	}
}
