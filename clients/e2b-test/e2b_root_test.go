package e2btest

import (
	"context"
	"encoding/json"
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

// npmCI installs the pinned SDK into node_modules.
func npmCI(t testing.TB) (nodeBin string) {
	t.Helper()
	nodeBin = testtier.Command(t, "js", "node", hint)
	npm := testtier.Command(t, "js", "npm", hint)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ci := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--prefer-offline")
	ci.Env = append(os.Environ(), "npm_config_update_notifier=false")
	if out, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in clients/e2b-test: %v (is the npm registry or npm's cache reachable?)\n%s", err, out)
	}
	return nodeBin
}

// sdkEnv points the SDK at srv, control API and envd on its TCP listener.
func sdkEnv(srv *serverproc.Servers) []string {
	url := "http://" + srv.Addr
	return append(os.Environ(), "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url, "E2B_API_KEY="+testToken,
		"E2B_DOMAIN=", "E2B_DEBUG=", "NO_COLOR=1")
}

// TestE2BSDKServe installs the pinned e2b SDK (npm ci) and runs the
// suite in test/ against the real serve (with testdata/policy.rego),
// control API and envd on the one TCP listener, then checks that serve
// stops on SIGTERM with status 0 and that its decision log has the
// suite's denials.
func TestE2BSDKServe(t *testing.T) {
	testtier.Root(t)
	nodeBin := npmCI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	policy, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	srv := serverproc.Serve(t, testToken, "--policy", policy)
	// The files by name: Node 22 takes --test's arguments as files or
	// globs, not directories, and Node 20 has no globs.
	files, err := filepath.Glob("test/*.test.mjs")
	if err != nil || len(files) == 0 {
		t.Fatalf("the SDK suite's files: %v %v", files, err)
	}
	cmd := exec.CommandContext(ctx, nodeBin, append([]string{"--test", "--test-reporter=tap"}, files...)...)
	cmd.Env = sdkEnv(srv)
	b, err := cmd.CombinedOutput()
	out := string(b)
	t.Logf("node --test test/:\n%s", out)
	if err != nil {
		t.Errorf("node --test test/: %v", err)
	}
	for _, want := range []string{"# pass 7", "# fail 0", "# skipped 0", "# cancelled 0"} {
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

// BenchmarkE2BSDK runs bench/bench.mjs against the real serve with a warm
// pool of 2: commands.run('true') through the SDK beside the REST API's
// exec of the same argv, and Sandbox.create() to a command's first output,
// cold and warm (docs/benchmarks.md). One run of the script whatever b.N:
// it times its own iterations.
func BenchmarkE2BSDK(b *testing.B) {
	testtier.Root(b)
	nodeBin := npmCI(b)
	srv := serverproc.Serve(b, testToken, "--warm", "2")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b.ResetTimer()
	cmd := exec.CommandContext(ctx, nodeBin, "bench/bench.mjs")
	cmd.Env = sdkEnv(srv)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("node bench/bench.mjs: %v\n%s%s", err, out, stderr.String())
	}
	b.StopTimer()
	var figures map[string]float64
	if err := json.Unmarshal(out, &figures); err != nil {
		b.Fatalf("bench/bench.mjs printed %q: %v", out, err)
	}
	for _, k := range []string{"sdk_run_p50_ms", "sdk_run_p99_ms", "rest_run_p50_ms", "rest_run_p99_ms", "create_cold_p50_ms", "create_warm_p50_ms"} {
		v, ok := figures[k]
		if !ok {
			b.Fatalf("bench/bench.mjs gave no %s: %s", k, out)
		}
		b.ReportMetric(v, strings.ReplaceAll(k, "_", "-"))
	}
	b.ReportMetric(0, "ns/op")
	srv.Stop(b)
}
