package e2b_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server"
	"github.com/agentsandbox/agentsandbox/server/e2b"
)

const key = "e2b-transport-test-key-0123456789"

// serve is the REST server with the E2B transport over the real Manager
// on the fake backend, on TCP with one token.
func serve(t *testing.T) string {
	t.Helper()
	m := managertest.New(t, sandboxes.Options{})
	s, err := server.New(server.Options{Manager: m, Token: key, Transports: e2b.New(m, e2b.Options{}).Transports()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

type call struct {
	method, path string
	headers      map[string]string
	body         string
}

func do(t *testing.T, base string, c call) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

type created struct {
	SandboxID, EnvdVersion, EnvdAccessToken string
}

func create(t *testing.T, base, body string) created {
	t.Helper()
	code, _, b := do(t, base, call{"POST", "/v2/sandboxes", map[string]string{"X-API-Key": key, "Content-Type": "application/json"}, body})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	var c created
	if err := json.Unmarshal(b, &c); err != nil || c.SandboxID == "" || c.EnvdAccessToken == "" || c.EnvdVersion != e2b.EnvdVersion {
		t.Fatalf("create answered %s (%v)", b, err)
	}
	return c
}

func envd(c created) map[string]string {
	return map[string]string{"E2b-Sandbox-Id": c.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": c.EnvdAccessToken}
}

func with(h map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// stream runs a Start and returns its events' JSON and the end-of-stream
// envelope's.
func stream(t *testing.T, base string, c created, req string, timeoutMs string) ([]string, string) {
	t.Helper()
	var body bytes.Buffer
	body.Write([]byte{0, 0, 0, 0, 0})
	binary.BigEndian.PutUint32(body.Bytes()[1:], uint32(len(req)))
	body.WriteString(req)
	h := with(envd(c), "Content-Type", "application/connect+json", "Connect-Protocol-Version", "1")
	if timeoutMs != "" {
		h["Connect-Timeout-Ms"] = timeoutMs
	}
	code, hdr, b := do(t, base, call{"POST", "/process.Process/Start", h, body.String()})
	if code != http.StatusOK || hdr.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("Start: %d %s %q", code, hdr.Get("Content-Type"), b)
	}
	r := bufio.NewReader(bytes.NewReader(b))
	var events []string
	for {
		var head [5]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			t.Fatalf("the stream ended without an end-of-stream envelope: %q", b)
		}
		msg := make([]byte, binary.BigEndian.Uint32(head[1:]))
		if _, err := io.ReadFull(r, msg); err != nil {
			t.Fatal(err)
		}
		if head[0] == 2 {
			if r.Buffered() != 0 {
				t.Fatalf("bytes after the end of the stream: %q", b)
			}
			return events, string(msg)
		}
		events = append(events, string(msg))
	}
}

func TestControlAndEnvd(t *testing.T) {
	base := serve(t)
	// The control API answers E2B's error shape, its auth included.
	code, _, b := do(t, base, call{"POST", "/v2/sandboxes", map[string]string{"X-API-Key": "wrong-key-0123456789"}, `{"templateID":"base"}`})
	if code != http.StatusUnauthorized || !strings.HasPrefix(string(b), `{"code":401,"message":`) {
		t.Fatalf("a wrong key: %d %s", code, b)
	}
	code, _, b = do(t, base, call{"POST", "/v2/sandboxes", map[string]string{"X-API-Key": key}, `{"templateID":"base","autoPause":true}`})
	if code != http.StatusBadRequest || !strings.Contains(string(b), `autoPause`) {
		t.Fatalf("an unknown field: %d %s", code, b)
	}
	c := create(t, base, `{"templateID":"base","metadata":{"who":"test"},"envVars":{"A":"1"}}`)
	other := create(t, base, `{"templateID":"base"}`)

	code, _, b = do(t, base, call{"GET", "/v2/sandboxes?metadata=who%3Dtest", map[string]string{"X-API-Key": key}, ""})
	if code != http.StatusOK || !strings.Contains(string(b), c.SandboxID) || strings.Contains(string(b), other.SandboxID) {
		t.Fatalf("list by metadata: %d %s", code, b)
	}
	code, hdr, b := do(t, base, call{"GET", "/v2/sandboxes?limit=1", map[string]string{"X-API-Key": key}, ""})
	var page []map[string]any
	json.Unmarshal(b, &page)
	if code != http.StatusOK || len(page) != 1 || hdr.Get("X-Next-Token") == "" {
		t.Fatalf("a page of 1: %d %s %q", code, b, hdr.Get("X-Next-Token"))
	}
	code, hdr, b = do(t, base, call{"GET", "/v2/sandboxes?limit=1&nextToken=" + hdr.Get("X-Next-Token"), map[string]string{"X-API-Key": key}, ""})
	var page2 []map[string]any
	json.Unmarshal(b, &page2)
	if code != http.StatusOK || len(page2) != 1 || page2[0]["sandboxID"] == page[0]["sandboxID"] || hdr.Get("X-Next-Token") != "" {
		t.Fatalf("the last page: %d %s %q", code, b, hdr.Get("X-Next-Token"))
	}

	// envd: a command's stream is start, data, end, then the end of the
	// stream; the sandbox's env and the request's are the command's.
	events, end := stream(t, base, c, `{"process":{"cmd":"/bin/sh","args":["-c","echo $A$B; exit 3"],"envs":{"B":"2"}}}`, "")
	if end != `{}` || len(events) < 3 || events[0] != `{"event":{"start":{"pid":1}}}` ||
		events[1] != `{"event":{"data":{"stdout":"MTIK"}}}` || events[len(events)-1] != `{"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3"}}}` {
		t.Fatalf("Start: %q, end %s", events, end)
	}
	// Connect-Timeout-Ms kills the command (the agent's SIGTERM, as a
	// real sandbox's), and the end says why.
	began := time.Now()
	events, _ = stream(t, base, c, `{"process":{"cmd":"sleep","args":["10"]}}`, "300")
	if last := events[len(events)-1]; !strings.Contains(last, `"status":"signal: terminated"`) || !strings.Contains(last, "timeout") || time.Since(began) > 5*time.Second {
		t.Fatalf("a command past its timeout: %q after %s", events, time.Since(began))
	}
	events, end = stream(t, base, c, `{"process":{"cmd":"/bin/bash"},"pty":{"size":{"cols":80,"rows":24}}}`, "")
	// The fake backend's agent runs on the host: it refuses a pty (the
	// host's devpts), and the end says why.
	if end != `{}` || len(events) != 2 || !strings.Contains(events[1], "no devpts of its own") {
		t.Fatalf("a pty on the fake backend: %q %s", events, end)
	}

	// Files: a write, a read, and the token of another sandbox refused.
	code, _, b = do(t, base, call{"POST", "/files?path=/home/user/d/f.txt", with(envd(c), "Content-Type", "application/octet-stream"), "hello"})
	if code != http.StatusOK || string(b) != `[{"path":"/home/user/d/f.txt","name":"f.txt","type":"file"}]` {
		t.Fatalf("write: %d %s", code, b)
	}
	code, _, b = do(t, base, call{"GET", "/files?path=d/f.txt", envd(c), ""})
	if code != http.StatusOK || string(b) != "hello" {
		t.Fatalf("read: %d %s", code, b)
	}
	for _, h := range []map[string]string{with(envd(c), "X-Access-Token", other.EnvdAccessToken), with(envd(c), "X-Access-Token", "")} {
		code, _, b = do(t, base, call{"GET", "/files?path=d/f.txt", h, ""})
		if code != http.StatusUnauthorized || !strings.Contains(string(b), `"code":"unauthenticated"`) {
			t.Fatalf("a read with token %q: %d %s", h["X-Access-Token"], code, b)
		}
	}
	code, _, b = do(t, base, call{"GET", "/files?path=../../etc/passwd", envd(c), ""})
	if code != http.StatusBadRequest {
		t.Fatalf("a read outside the workspace: %d %s", code, b)
	}
	code, _, b = do(t, base, call{"POST", "/filesystem.Filesystem/ListDir", with(envd(c), "Content-Type", "application/json"), `{"path":"/home/user","depth":2}`})
	if code != http.StatusOK || !strings.Contains(string(b), `"path":"/home/user/d/f.txt"`) || !strings.Contains(string(b), `"type":"FILE_TYPE_DIRECTORY"`) {
		t.Fatalf("ListDir: %d %s", code, b)
	}
	code, _, b = do(t, base, call{"POST", "/filesystem.Filesystem/Stat", with(envd(c), "Content-Type", "application/json"), `{"path":"nope"}`})
	if code != http.StatusNotFound || !strings.Contains(string(b), `"code":"not_found"`) {
		t.Fatalf("Stat of nothing: %d %s", code, b)
	}
	code, _, b = do(t, base, call{"POST", "/filesystem.Filesystem/Move", with(envd(c), "Content-Type", "application/json"), `{}`})
	if code != http.StatusBadRequest || !strings.Contains(string(b), `"code":"invalid_argument"`) {
		t.Fatalf("Move of nothing: %d %s", code, b)
	}

	// Routes not built answer E2B's 501; kill ends the sandbox, and its
	// health is then 502.
	code, _, b = do(t, base, call{"POST", "/sandboxes/" + c.SandboxID + "/pause", map[string]string{"X-API-Key": key}, ""})
	if code != http.StatusNotImplemented || !strings.Contains(string(b), `"code":501`) {
		t.Fatalf("pause: %d %s", code, b)
	}
	health := func() int {
		code, _, _ := do(t, base, call{"GET", "/health", map[string]string{"E2b-Sandbox-Id": c.SandboxID}, ""})
		return code
	}
	if h := health(); h != http.StatusNoContent {
		t.Fatalf("health of a running sandbox: %d", h)
	}
	code, _, b = do(t, base, call{"POST", "/sandboxes/" + c.SandboxID + "/timeout", map[string]string{"X-API-Key": key}, `{"timeout":60}`})
	if code != http.StatusNoContent {
		t.Fatalf("timeout: %d %s", code, b)
	}
	code, _, b = do(t, base, call{"GET", "/sandboxes/" + c.SandboxID, map[string]string{"X-API-Key": key}, ""})
	var detail struct{ EndAt time.Time }
	json.Unmarshal(b, &detail)
	if left := time.Until(detail.EndAt); code != http.StatusOK || left < 50*time.Second || left > 61*time.Second {
		t.Fatalf("getInfo after a timeout of 60s: %d %s", code, b)
	}
	if code, _, b = do(t, base, call{"DELETE", "/sandboxes/" + c.SandboxID, map[string]string{"X-API-Key": key}, ""}); code != http.StatusNoContent {
		t.Fatalf("kill: %d %s", code, b)
	}
	if code, _, b = do(t, base, call{"DELETE", "/sandboxes/" + c.SandboxID, map[string]string{"X-API-Key": key}, ""}); code != http.StatusNotFound || !strings.HasPrefix(string(b), `{"code":404,`) {
		t.Fatalf("kill again: %d %s", code, b)
	}
	if h := health(); h != http.StatusBadGateway {
		t.Fatalf("health of a killed sandbox: %d", h)
	}
	// A stream's errors, the server's own too, are its end-of-stream
	// envelope: the SDK reads no body of a stream's non-200 answer.
	events, end = stream(t, base, c, `{"process":{"cmd":"true"}}`, "")
	if len(events) != 0 || !strings.Contains(end, `"code":"not_found"`) || !strings.Contains(end, "is not running") {
		t.Fatalf("Start in a killed sandbox: %q %s", events, end)
	}
	events, end = stream(t, base, created{SandboxID: other.SandboxID, EnvdAccessToken: "wrong"}, `{"process":{"cmd":"true"}}`, "")
	if len(events) != 0 || !strings.Contains(end, `"code":"unauthenticated"`) {
		t.Fatalf("Start with a wrong token: %q %s", events, end)
	}
	// The REST API is as it was.
	if code, _, b = do(t, base, call{"GET", "/v1/sandboxes", map[string]string{"Authorization": "Bearer " + key}, ""}); code != http.StatusOK || !strings.Contains(string(b), `"sandboxes"`) {
		t.Fatalf("REST list: %d %s", code, b)
	}
}

// TestIdentities: the control API's key is an identity's, which owns the
// sandbox and is held to its limits; another identity finds nothing.
func TestIdentities(t *testing.T) {
	const keyA, keyB = "identity-a-key-0123456789abcdef", "identity-b-key-0123456789abcdef"
	m := managertest.New(t, sandboxes.Options{})
	s, err := server.New(server.Options{Manager: m, Transports: e2b.New(m, e2b.Options{}).Transports(), Identities: []server.Identity{
		{Identity: sandboxes.Identity{Name: "a", MaxSandboxes: 1}, TokenSHA256: sha256.Sum256([]byte(keyA))},
		{Identity: sandboxes.Identity{Name: "b", MaxSandboxes: 1}, TokenSHA256: sha256.Sum256([]byte(keyB))},
	}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	base := hs.URL
	as := func(k string) map[string]string { return map[string]string{"X-API-Key": k} }

	code, _, b := do(t, base, call{"POST", "/v2/sandboxes", as(keyA), `{"templateID":"base"}`})
	var c created
	if json.Unmarshal(b, &c); code != http.StatusCreated {
		t.Fatalf("a's create: %d %s", code, b)
	}
	if code, _, b := do(t, base, call{"POST", "/v2/sandboxes", as(keyA), `{"templateID":"base"}`}); code != http.StatusTooManyRequests || !strings.HasPrefix(string(b), `{"code":429,`) {
		t.Fatalf("a's second create, over its max_sandboxes 1: %d %s", code, b)
	}
	if code, _, b := do(t, base, call{"GET", "/v2/sandboxes", as(keyB), ""}); code != http.StatusOK || string(b) != "[]" {
		t.Fatalf("b's list: %d %s", code, b)
	}
	for _, cl := range []call{
		{"GET", "/sandboxes/" + c.SandboxID, as(keyB), ""},
		{"DELETE", "/sandboxes/" + c.SandboxID, as(keyB), ""},
		{"POST", "/sandboxes/" + c.SandboxID + "/timeout", as(keyB), `{"timeout":10}`},
		{"POST", "/v2/sandboxes/" + c.SandboxID + "/connect", as(keyB), `{}`},
	} {
		if code, _, b := do(t, base, cl); code != http.StatusNotFound || !strings.HasPrefix(string(b), `{"code":404,`) {
			t.Errorf("b's %s %s of a's sandbox: %d %s", cl.method, cl.path, code, b)
		}
	}
	// envd acts for a, whose token it is.
	code, _, b = do(t, base, call{"POST", "/filesystem.Filesystem/ListDir", with(envd(c), "Content-Type", "application/json"), `{"path":"/home/user"}`})
	if code != http.StatusOK {
		t.Fatalf("ListDir with a's token: %d %s", code, b)
	}
	infos, err := m.List(sandboxes.WithIdentity(context.Background(), sandboxes.Identity{Name: "a"}), nil)
	if err != nil || len(infos) != 1 || infos[0].Owner != "a" {
		t.Fatalf("a's sandboxes: %+v %v", infos, err)
	}
}

// TestUnixSocket: both transports answer on the unix socket too, where
// the control API's caller is the peer's uid (no key) and envd still
// wants the sandbox's token.
func TestUnixSocket(t *testing.T) {
	m := managertest.New(t, sandboxes.Options{})
	s, err := server.New(server.Options{Manager: m, Transports: e2b.New(m, e2b.Options{}).Transports()})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := server.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	post := func(path string, h map[string]string, body string) (int, []byte) {
		req, _ := http.NewRequest("POST", "http://sandbox"+path, strings.NewReader(body))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	code, b := post("/v2/sandboxes", nil, `{"templateID":"base"}`)
	var c created
	if json.Unmarshal(b, &c); code != http.StatusCreated || c.EnvdAccessToken == "" {
		t.Fatalf("create on the unix socket: %d %s", code, b)
	}
	if code, b = post("/filesystem.Filesystem/ListDir", with(envd(c), "Content-Type", "application/json"), `{"path":"/home/user"}`); code != http.StatusOK {
		t.Fatalf("ListDir with the token: %d %s", code, b)
	}
	if code, b = post("/filesystem.Filesystem/ListDir", with(envd(c), "Content-Type", "application/json", "X-Access-Token", ""), `{"path":"/home/user"}`); code != http.StatusUnauthorized {
		t.Fatalf("ListDir without the token: %d %s", code, b)
	}
}
