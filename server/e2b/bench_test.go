package e2b_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server"
	"github.com/agentsandbox/agentsandbox/server/e2b"
)

// BenchmarkRunTrue is `commands.run('true')` as the SDK sends it (envd's
// Start, a server stream), beside the REST API's exec of the same argv,
// both over the real Manager on the fake backend (the real agent, no
// jail) in one process: what the E2B transport adds to an exec.
func BenchmarkRunTrue(b *testing.B) {
	m := managertest.New(b, sandboxes.Options{})
	s, err := server.New(server.Options{Manager: m, Token: key, Transports: e2b.New(m, e2b.Options{}).Transports()})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	post := func(path string, h map[string]string, body []byte) []byte {
		req, _ := http.NewRequest("POST", hs.URL+path, bytes.NewReader(body))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			b.Fatalf("%s: %d %s", path, resp.StatusCode, out)
		}
		return out
	}
	var c created
	if err := json.Unmarshal(post("/v2/sandboxes", map[string]string{"X-API-Key": key, "Content-Type": "application/json"}, []byte(`{"templateID":"base"}`)), &c); err != nil {
		b.Fatal(err)
	}
	argv := `["-l","-c","true"]`
	b.Run("e2b-start", func(b *testing.B) {
		req := []byte(`{"process":{"cmd":"/bin/bash","args":` + argv + `}}`)
		body := make([]byte, 5, 5+len(req))
		binary.BigEndian.PutUint32(body[1:], uint32(len(req)))
		body = append(body, req...)
		h := with(envd(c), "Content-Type", "application/connect+json", "Connect-Protocol-Version", "1")
		for b.Loop() {
			if out := post("/process.Process/Start", h, body); !bytes.Contains(out, []byte(`"exitCode"`)) && !bytes.Contains(out, []byte(`"end"`)) {
				b.Fatalf("Start: %q", out)
			}
		}
	})
	b.Run("rest-exec", func(b *testing.B) {
		body := []byte(`{"argv":["/bin/bash","-l","-c","true"]}`)
		h := map[string]string{"Authorization": "Bearer " + key}
		for b.Loop() {
			if out := post("/v1/sandboxes/"+c.SandboxID+"/exec", h, body); !bytes.Contains(out, []byte(`"exit"`)) {
				b.Fatalf("exec: %q", out)
			}
		}
	})
}
