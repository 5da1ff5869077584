package python_test

import (
	"context"
	"github.com/agentsandbox/agentsandbox/internal/serverproc"
	"os"
	"os/exec"
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
// against fakeserve on a unix socket and on TCP with a token. The tests of
// network grants and workflow runs check that the fake refuses them with
// not_supported_yet.
func TestPythonClientFake(t *testing.T) {
	py := python3(t)
	fake := serverproc.Fake(t, testToken)
	sock, addr := fake.Socket, fake.Addr

	runPython(t, py, []string{"AGENTSANDBOX_TEST_SOCKET=" + sock, "AGENTSANDBOX_TEST_URL=http://" + addr,
		"AGENTSANDBOX_TEST_TOKEN=" + testToken, "AGENTSANDBOX_TEST_REAL="}, "-m", "unittest", "discover", "-v")
	out := runPython(t, py, []string{"AGENTSANDBOX_SOCKET=" + sock}, "examples/agent_loop.py")
	if !recordLine.MatchString(out) {
		t.Errorf("the agent loop printed no record id:\n%s", out)
	}
	fake.Stop(t)
}

// TestPythonClientServe runs the same tests and the agent loop against
// the real `agentsandbox serve`, whose sandboxes are namespace jails
// (AGENTSANDBOX_TEST_REAL=1: network grants and workflow runs are tested
// for real), then checks the loop's record verifies and that serve stops on
// SIGTERM with status 0.
func TestPythonClientServe(t *testing.T) {
	testtier.Root(t)
	py := python3(t)
	srv := serverproc.Serve(t, testToken)
	bin, state, sock, addr := srv.Bin, srv.State, srv.Socket, srv.Addr

	runPython(t, py, []string{"AGENTSANDBOX_TEST_SOCKET=" + sock, "AGENTSANDBOX_TEST_URL=http://" + addr,
		"AGENTSANDBOX_TEST_TOKEN=" + testToken, "AGENTSANDBOX_TEST_REAL=1"}, "-m", "unittest", "discover", "-v")
	out := runPython(t, py, []string{"AGENTSANDBOX_SOCKET=" + sock}, "examples/agent_loop.py")
	m := recordLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the agent loop printed no record id:\n%s", out)
	}
	if out, err := exec.Command(bin, "records", "verify", m[1], "--state-dir", state).CombinedOutput(); err != nil {
		t.Errorf("records verify %s: %v\n%s", m[1], err, out)
	}
	srv.Stop(t)
}
