package e2btest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/serverproc"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// TestMain builds the sandbox agent for the root tier, where the real
// serve starts jails with it as their init.
func TestMain(m *testing.M) {
	os.Exit(testtier.MainWithAgent(m))
}

const testToken = "e2b-sdk-test-token-0123456789"

const hint = "install nodejs and npm (scripts/setup.sh does)"

// TestE2BSDKServe installs the pinned e2b SDK (npm ci) and runs the
// suite in test/ against the real serve (with testdata/policy.rego),
// control API and envd on the one TCP listener, then checks that serve
// stops on SIGTERM with status 0 and that its decision log has the
// suite's denials.
func TestE2BSDKServe(t *testing.T) {
	testtier.Root(t)
	nodeBin := testtier.Command(t, "js", "node", hint)
	npm := testtier.Command(t, "js", "npm", hint)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ci := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--prefer-offline")
	ci.Env = append(os.Environ(), "npm_config_update_notifier=false")
	if out, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in clients/e2b-test: %v (is the npm registry or npm's cache reachable?)\n%s", err, out)
	}
	policy, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	srv := serverproc.Serve(t, testToken, "--policy", policy)
	url := "http://" + srv.Addr
	cmd := exec.CommandContext(ctx, nodeBin, "--test", "--test-reporter=tap", "test/")
	cmd.Env = append(os.Environ(), "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url, "E2B_API_KEY="+testToken,
		"E2B_DOMAIN=", "E2B_DEBUG=", "NO_COLOR=1")
	b, err := cmd.CombinedOutput()
	out := string(b)
	t.Logf("node --test test/:\n%s", out)
	if err != nil {
		t.Errorf("node --test test/: %v", err)
	}
	for _, want := range []string{"# pass 6", "# fail 0", "# skipped 0", "# cancelled 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("node --test: no %q in its summary", want)
		}
	}
	srv.Stop(t)
	// The denials are the server's decisions, logged as the REST API's
	// are, for the identity whose key the SDK sent.
	log, err := os.ReadFile(filepath.Join(srv.State, "serve-decisions.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"agents may not read secret/", "commands may not say forbidden-word", `"name":"token"`} {
		if !strings.Contains(string(log), want) {
			t.Errorf("serve-decisions.log has no %q", want)
		}
	}
}
