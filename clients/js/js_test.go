package js_test

import (
	"context"
	"github.com/agentsandbox/agentsandbox/internal/serverproc"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// TestMain builds the sandbox agent for the root tier, where the real
// serve starts jails with it as their init.
func TestMain(m *testing.M) {
	os.Exit(testtier.MainWithAgent(m))
}

const testToken = "js-client-test-token-0123456789"

const hint = "install nodejs and npm (scripts/setup.sh does)"

var (
	npmOnce sync.Once
	npmErr  error
	npmOut  []byte
)

// node returns the path of node once `npm ci` has installed the client's
// pinned dependencies (package-lock.json) into clients/js/node_modules,
// or skips (in CI fails) without node and npm.
func node(t *testing.T) string {
	t.Helper()
	nodeBin := testtier.Command(t, "js", "node", hint)
	npm := testtier.Command(t, "js", "npm", hint)
	npmOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--prefer-offline")
		cmd.Env = append(os.Environ(), "npm_config_update_notifier=false")
		npmOut, npmErr = cmd.CombinedOutput()
	})
	if npmErr != nil {
		t.Fatalf("npm ci in clients/js: %v (is the npm registry or npm's cache reachable?)\n%s", npmErr, npmOut)
	}
	return nodeBin
}

// runNode runs node args in clients/js with env added and fails the test
// with node's output if it fails. LangSmith tracing is off: nothing may
// leave the machine.
func runNode(t *testing.T, nodeBin string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, args...)
	cmd.Env = append(append(os.Environ(), "LANGSMITH_TRACING=false", "LANGCHAIN_TRACING_V2=false", "NO_COLOR=1"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("node %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

var recordLine = regexp.MustCompile(`(?m)^record ([0-9a-z]{32,64})$`)

// testEnv points the node:test suite at both ways to the server; real
// says it is the real serve (AGENTSANDBOX_TEST_REAL=1), whose network
// grants and workflow runs the suite tests, where against the fake it
// tests that they are refused with not_supported_yet.
func testEnv(sock, addr string, real bool) []string {
	r := ""
	if real {
		r = "1"
	}
	return []string{"AGENTSANDBOX_TEST_SOCKET=" + sock, "AGENTSANDBOX_TEST_URL=http://" + addr,
		"AGENTSANDBOX_TEST_TOKEN=" + testToken, "AGENTSANDBOX_TEST_REAL=" + r}
}

// checkSuite fails unless node's TAP summary says every test passed and
// none was skipped (the suite skips what has no server).
func checkSuite(t *testing.T, out string) {
	t.Helper()
	for _, want := range []string{"# fail 0", "# skipped 0", "# cancelled 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("node --test: no %q in its summary:\n%s", want, out)
		}
	}
}

// TestJSClientFake runs the client's tests and the example agent loop
// against fakeserve on a unix socket and on TCP with a token.
func TestJSClientFake(t *testing.T) {
	nodeBin := node(t)
	fake := serverproc.Fake(t, testToken)
	sock, addr := fake.Socket, fake.Addr

	checkSuite(t, runNode(t, nodeBin, testEnv(sock, addr, false), append([]string{"--test", "--test-reporter=tap"}, suiteFiles(t)...)...))
	for _, env := range [][]string{
		{"AGENTSANDBOX_SOCKET=" + sock},
		{"AGENTSANDBOX_SOCKET=", "AGENTSANDBOX_URL=http://" + addr, "AGENTSANDBOX_TOKEN=" + testToken},
	} {
		out := runNode(t, nodeBin, env, "examples/agent-loop.mjs")
		if !recordLine.MatchString(out) {
			t.Errorf("the agent loop (%s) printed no record id:\n%s", env, out)
		}
	}
	fake.Stop(t)
}

// TestJSClientServe runs the same tests and the agent loop against the
// real `agentsandbox serve`, whose sandboxes are namespace jails, then
// checks that the loop's record verifies and that serve stops on SIGTERM
// with status 0.
func TestJSClientServe(t *testing.T) {
	testtier.Root(t)
	nodeBin := node(t)
	srv := serverproc.Serve(t, testToken)
	bin, state, sock, addr := srv.Bin, srv.State, srv.Socket, srv.Addr

	checkSuite(t, runNode(t, nodeBin, testEnv(sock, addr, true), append([]string{"--test", "--test-reporter=tap"}, suiteFiles(t)...)...))
	out := runNode(t, nodeBin, []string{"AGENTSANDBOX_SOCKET=" + sock}, "examples/agent-loop.mjs")
	m := recordLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the agent loop printed no record id:\n%s", out)
	}
	if out, err := exec.Command(bin, "records", "verify", m[1], "--state-dir", state).CombinedOutput(); err != nil {
		t.Errorf("records verify %s: %v\n%s", m[1], err, out)
	}
	srv.Stop(t)
}

// suiteFiles are the node:test files, by name: Node 22 takes --test's
// arguments as files or globs, not directories, and Node 20 has no globs.
func suiteFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("test/*.test.mjs")
	if err != nil || len(files) == 0 {
		t.Fatalf("the suite's files: %v %v", files, err)
	}
	return files
}
