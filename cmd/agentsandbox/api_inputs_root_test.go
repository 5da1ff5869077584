package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsandbox/agentsandbox/internal/serverproc"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	mcpserver "github.com/agentsandbox/agentsandbox/server/mcp"
)

func hexSum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// inlineWithInput is an inline workflow whose one step cats input "in"
// from source (pinned with pin: sha256 or commit).
func inlineWithInput(source, pin string) string {
	return `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: api-input
inputs:
  in:
    source: "` + source + `"
    ` + pin + `
steps:
  - name: leak
    isolation: namespace
    inputs: [in]
    run: cat in 2>/dev/null || cat in/*
    resources: {timeout: 30s}
`
}

// apiRun posts an inline run to serve and returns the status and the body.
func apiRun(t *testing.T, c *http.Client, base, inline string) (int, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"inline": inline})
	resp, err := c.Post(base+"/v1/runs", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// TestServeConfinesAPIInputs: the attacks of an API client on the inputs
// of the workflows it sends, against a real `serve` (REST and MCP), each
// refused with a 4xx that names the input and the rule, and nothing of
// what was refused in the answer:
//   - a missing file pinned to the digest of another run's stdout (read
//     from that run's record over MCP) is not served from the blob store;
//   - a git source on the host (git::file://) is not checked out;
//   - an http input on loopback is never requested (by address, by name,
//     or by a redirect from an address the operator's policy opens), and
//     a wrong pin does not reveal the body's digest.
//
// The operator's policy data opens one loopback port, which an API
// caller's input is fetched from; the operator's own workflow in the
// template directory still reads the host repository.
//
// The other client is the socket's root (an admin, who owns all stored
// content); the attacker is a user identity on TCP.
func TestServeConfinesAPIInputs(t *testing.T) {
	testtier.Root(t)
	testtier.Command(t, "git", "git", "install Debian's git")
	dir := t.TempDir()
	bin := buildCLI(t, dir)
	state := filepath.Join(dir, "state")
	templates := filepath.Join(dir, "templates")

	// The host's repository, which only the operator's workflows may read.
	hostRepo := filepath.Join(dir, "host-repo")
	os.MkdirAll(hostRepo, 0o755)
	os.WriteFile(filepath.Join(hostRepo, "secret.txt"), []byte("HOST-REPO-SECRET\n"), 0o644)
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"commit", "-q", "-m", "s"}} {
		cmd := exec.Command("git", append([]string{"-C", hostRepo}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	out, err := exec.Command("git", "-C", hostRepo, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	commit := strings.TrimSpace(string(out))
	os.MkdirAll(templates, 0o755)
	os.WriteFile(filepath.Join(templates, "operator.yaml"), []byte(strings.Replace(inlineWithInput("git::file://"+hostRepo, "commit: "+commit), "api-input", "operator", 1)), 0o644)

	// The victim: a service on the host's loopback.
	victimBody := []byte("LOOPBACK-SECRET\n")
	var victimHits atomic.Int64
	victim := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		victimHits.Add(1)
		w.Write(victimBody)
	}))
	defer victim.Close()
	_, victimPort, _ := net.SplitHostPort(victim.Listener.Addr().String())
	// A loopback service the operator opens to API callers, which
	// redirects to the victim on /redirect.
	opened := []byte("opened data\n")
	var openedHits atomic.Int64
	open := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		openedHits.Add(1)
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, victim.URL+"/secret", http.StatusFound)
			return
		}
		w.Write(opened)
	}))
	defer open.Close()
	_, openPort, _ := net.SplitHostPort(open.Listener.Addr().String())
	data := filepath.Join(dir, "policy-data.json")
	os.WriteFile(data, []byte(`{"agentsandbox": {"api_inputs": {"network_allow": ["127.0.0.1/32:`+openPort+`"]}}}`), 0o644)

	addr := serverproc.FreePort(t)
	ids := filepath.Join(dir, "identities.yaml")
	os.WriteFile(ids, []byte("identities:\n  - name: attacker\n    token_sha256: "+hexSum([]byte(tenantB))+"\n"), 0o600)
	s := startApply(t, bin, "serve", "--state-dir", state, "--templates", templates, "--policy-data", data, "--listen", addr, "--identities", ids)
	s.waitFor(t, "serving on tcp", time.Minute)
	defer func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		s.wait()
	}()
	c := unixClient(filepath.Join(state, socketName))
	attacker, attackerURL := &http.Client{Transport: bearerTransport{tenantB}}, "http://"+addr
	ctx := context.Background()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "0"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: "http://sandbox/mcp", HTTPClient: c, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect to serve's /mcp: %v", err)
	}
	defer cs.Close()

	// Another client's run, whose stdout is a secret; its record, with
	// the stdout's digest, is readable over MCP (to that client: the
	// attacker is handed the digest here, as if it had guessed it).
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_workflow", Arguments: map[string]any{"inline": `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: victim-run
steps:
  - name: s
    isolation: namespace
    run: echo OTHER-CLIENT-SECRET
    resources: {timeout: 30s}
`}})
	if err != nil || res.IsError {
		t.Fatalf("the other client's run: %v %+v", err, res)
	}
	recID, _ := res.StructuredContent.(map[string]any)["record"].(string)
	rr, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: mcpserver.RecordURIPrefix + recID})
	if err != nil {
		t.Fatalf("read the other run's record over MCP: %v", err)
	}
	var rec struct {
		Steps []struct {
			Logs struct{ Stdout string } `json:"logs"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(rr.Contents[0].Text), &rec); err != nil || len(rec.Steps) != 1 {
		t.Fatalf("record: %v %s", err, rr.Contents[0].Text)
	}
	stdoutDigest := strings.TrimPrefix(rec.Steps[0].Logs.Stdout, "sha256:")

	for _, c2 := range []struct {
		name       string
		inline     string
		status     int
		want       []string
		mustNotSay []string
	}{
		{"stored blob by digest", inlineWithInput("no-such-file.txt", `sha256: "`+stdoutDigest+`"`), 400,
			[]string{`"code":"bad_request"`, `input \"in\"`, "never from the server's store"}, []string{"OTHER-CLIENT-SECRET"}},
		{"host git repository", inlineWithInput("git::file://"+hostRepo, "commit: "+commit), 403,
			[]string{`"code":"policy_denied"`, `input \"in\"`, "data.agentsandbox.api_inputs.git_schemes"}, []string{"HOST-REPO-SECRET"}},
		{"loopback address", inlineWithInput(victim.URL+"/secret", `sha256: "`+hexSum([]byte("a guess"))+`"`), 403,
			[]string{`"code":"policy_denied"`, `input \"in\"`, "127.0.0.1 is a loopback address", "data.agentsandbox.api_inputs.network_allow"}, []string{hexSum(victimBody), "LOOPBACK-SECRET"}},
		{"loopback by name", inlineWithInput("http://localhost:"+victimPort+"/secret", `sha256: "`+hexSum([]byte("a guess"))+`"`), 403,
			[]string{`"code":"policy_denied"`, `input \"in\"`, "localhost (port " + victimPort + ") resolves only to addresses", "the run's record"}, []string{hexSum(victimBody), "LOOPBACK-SECRET"}},
		{"redirect to loopback", inlineWithInput(open.URL+"/redirect", `sha256: "`+hexSum([]byte("a guess"))+`"`), 403,
			[]string{`"code":"policy_denied"`, `input \"in\"`, "127.0.0.1 is a loopback address"}, []string{hexSum(victimBody), "LOOPBACK-SECRET"}},
		{"opened address, wrong pin", inlineWithInput(open.URL+"/data", `sha256: "`+hexSum([]byte("a guess"))+`"`), 400,
			[]string{`"code":"bad_request"`, "checksum mismatch", hexSum([]byte("a guess"))}, []string{hexSum(opened)}},
	} {
		status, body := apiRun(t, attacker, attackerURL, c2.inline)
		t.Logf("%s: %d %s", c2.name, status, body)
		if status != c2.status {
			t.Errorf("%s: status %d, want %d: %s", c2.name, status, c2.status, body)
		}
		for _, w := range c2.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: the answer lacks %q: %s", c2.name, w, body)
			}
		}
		for _, w := range c2.mustNotSay {
			if strings.Contains(body, w) {
				t.Errorf("%s: the answer shows %q: %s", c2.name, w, body)
			}
		}
	}
	if n := victimHits.Load(); n != 0 {
		t.Errorf("the loopback victim was asked %d times", n)
	}
	if n := openedHits.Load(); n != 2 {
		t.Errorf("the opened service was asked %d times, want 2 (the redirect and the wrong pin)", n)
	}

	// The same refusal over MCP.
	ca := mcpAs(t, addr, tenantB)
	res, err = ca.CallTool(ctx, &sdk.CallToolParams{Name: "run_workflow", Arguments: map[string]any{
		"inline": inlineWithInput("no-such-file.txt", `sha256: "`+stdoutDigest+`"`)}})
	if err != nil || !res.IsError || !strings.HasPrefix(res.Content[0].(*sdk.TextContent).Text, "bad_request: ") ||
		strings.Contains(res.Content[0].(*sdk.TextContent).Text, "OTHER-CLIENT-SECRET") {
		t.Errorf("the stored blob over MCP: %v %+v", err, res)
	}

	// What the policy allows works: the opened address, with its pin.
	status, body := apiRun(t, attacker, attackerURL, inlineWithInput(open.URL+"/data", `sha256: "`+hexSum(opened)+`"`))
	if status != 200 || !strings.Contains(body, `"status":"succeeded"`) || !strings.Contains(body, "opened data") {
		t.Errorf("an input from the address the operator opened: %d %s", status, body)
	}
	// The operator's own workflow still reads the host repository.
	resp, err := c.Post("http://sandbox/v1/runs", "application/json", strings.NewReader(`{"workflow": "operator.yaml"}`))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(b.String(), "HOST-REPO-SECRET") {
		t.Errorf("the operator's workflow with a host git input: %d %s", resp.StatusCode, b.String())
	}
}
