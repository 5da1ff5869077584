package sandboxes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/internal/testnet"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/namespace"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// netAPI is a real server over the real manager whose sandboxes reach
// testnet's internet, under the default policy with data and the team
// rules rego.
func netAPI(t *testing.T, in *testnet.Internet, data, rego string) *api {
	t.Helper()
	testtier.Root(t)
	dir := t.TempDir()
	store, err := record.OpenStore(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	df := filepath.Join(dir, "data.json")
	if err := os.WriteFile(df, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	pd := filepath.Join(dir, "policy")
	if err := os.MkdirAll(pd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pd, "team.rego"), []byte(rego), 0o644); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(context.Background(), policy.Options{Dirs: []string{pd}, DataFiles: []string{df}})
	if err != nil {
		t.Fatal(err)
	}
	hostState := filepath.Join(dir, "host-state")
	m, err := sandboxes.New(sandboxes.Options{
		Engine: engine.Options{
			Jobs: 1, Host: engine.Host{Root: true}, Store: store,
			RunRoot: filepath.Join(store.Dir(), "runs"), HostStateDir: hostState,
			Backends: map[workflow.Isolation]vmrunner.Backend{
				workflow.IsolationNamespace: namespace.New(namespace.Options{StateDir: hostState, JailDir: filepath.Join(dir, "jails")}),
			},
			Policy: pol, ToolVersion: "test",
			Upstream: engine.Upstream{Resolve: in.Resolve, Dial: in.Dial},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Manager: m, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "serve.sock")
	l, err := server.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}
	return &api{c: &http.Client{Transport: tr}, store: store, dir: dir}
}

// apiError is a request's status and error body.
func (a *api) apiError(t *testing.T, method, path string, body any) (int, sandboxes.Error) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, "http://sandbox"+path, bytes.NewReader(b))
	resp, err := a.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e struct{ Error sandboxes.Error }
	if resp.StatusCode >= 300 {
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode, e.Error
}

// denials are the "deny: " lines of a policy denial's message.
func denials(msg string) []string {
	var out []string
	for _, l := range strings.Split(msg, "\n") {
		if d, ok := strings.CutPrefix(strings.TrimSpace(l), "deny: "); ok {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

// TestGrantAdmittedLikeCreate: every entry admission refuses at create
// (open egress, a missing port, a forbidden name, a team rule's host,
// loopback, metadata, a private range) is refused the same way, word for
// word, when a client grants it to a running sandbox through POST
// /v1/sandboxes/ID/network; the job never reaches what was refused, and a
// grant the admission allows still works.
func TestGrantAdmittedLikeCreate(t *testing.T) {
	in := testnet.New(t)
	a := netAPI(t, in, `{"agentsandbox": {"egress_deny": ["evil.example.test", "*.evil.example.test"]}}`, `package agentsandbox.team

deny contains msg if {
	some step in input.workflow.steps
	some entry in step.network.allow
	startswith(entry, "v6.example.test")
	msg := sprintf("step %q: %s is not for this team", [step.name, entry])
}
`)
	spec := func(allow ...string) sandboxes.Spec {
		return sandboxes.Spec{Network: &sandboxes.Network{Allow: allow}, Resources: map[string]any{"bandwidth": "100Mbit"}}
	}
	var info sandboxes.Info
	if err := a.do("POST", "/v1/sandboxes", spec("api.example.test:80"), &info); err != nil {
		t.Fatal(err)
	}
	fetch := func(host string) string {
		t.Helper()
		out, code, err := a.exec(info.ID, sandboxes.ExecRequest{Argv: []string{"bash", "-c", get, host}})
		if err != nil || code != 0 {
			t.Fatalf("fetch %s: %v, exit %d", host, err, code)
		}
		return out
	}
	for _, entry := range []string{
		"0.0.0.0/0:80",          // open_egress
		"*.example.test",        // require_egress_port
		"evil.example.test:80",  // egress_deny
		"v6.example.test:80",    // a team rule
		"127.0.0.1/32:80",       // loopback: only egress_internal opens it
		"169.254.169.254/32:80", // cloud metadata, likewise
		"10.0.0.0/8:80",         // a private range, likewise
	} {
		code, created := a.apiError(t, "POST", "/v1/sandboxes", spec(entry))
		if code != http.StatusForbidden || created.Code != sandboxes.CodeDenied || len(denials(created.Message)) == 0 {
			t.Fatalf("create with %s: %d %+v, want a policy denial", entry, code, created)
		}
		code, granted := a.apiError(t, "POST", "/v1/sandboxes/"+info.ID+"/network", sandboxes.NetworkUpdate{Grant: []string{entry}})
		if code != http.StatusForbidden || granted.Code != sandboxes.CodeDenied || granted.Decision == "" {
			t.Errorf("grant %s: %d %+v, want a policy denial", entry, code, granted)
			continue
		}
		if got, want := denials(granted.Message), denials(created.Message); !slices.Equal(got, want) {
			t.Errorf("grant %s denied with\n  %q\nthe create with\n  %q", entry, got, want)
		}
	}
	var n sandboxes.NetworkInfo
	if err := a.do("GET", "/v1/sandboxes/"+info.ID+"/network", nil, &n); err != nil || strings.Join(n.Allow, ",") != "api.example.test:80" {
		t.Errorf("network after the refused grants: %+v %v", n, err)
	}
	if got := fetch("evil.example.test"); !strings.Contains(got, "connect failed") {
		t.Errorf("the forbidden host was reached: %q", got)
	}
	for _, host := range []string{"v6.example.test", "meta.example.test"} {
		if got := fetch(host); !strings.Contains(got, "connect failed") {
			t.Errorf("%s was reached: %q", host, got)
		}
	}

	// A grant the admission allows goes through.
	if err := a.do("POST", "/v1/sandboxes/"+info.ID+"/network", sandboxes.NetworkUpdate{Grant: []string{"data.example.test:80"}}, &n); err != nil {
		t.Fatal(err)
	}
	if got := fetch("data.example.test"); !strings.Contains(got, "testnet GET data.example.test /hello") {
		t.Errorf("granted: %q", got)
	}
	if err := a.do("DELETE", "/v1/sandboxes/"+info.ID, nil, nil); err != nil {
		t.Fatal(err)
	}
}

// get fetches http://HOST/hello from inside the sandbox (bash's
// /dev/tcp), or prints "connect failed".
const get = `exec 3<>"/dev/tcp/$0/80" || { echo connect failed; exit 0; }
printf "GET /hello HTTP/1.0\r\nHost: %s\r\n\r\n" "$0" >&3
cat <&3`
