package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// harmless runs `true` in place of whatever a fuzzed exec asks for: the
// fake backend runs commands on the host.
type harmless struct{ *managertest.Manager }

func (h harmless) Exec(ctx context.Context, id string, r sandboxes.ExecRequest, emit func(sandboxes.ExecEvent) error) (sandboxes.ExecInfo, error) {
	if len(r.Argv) > 0 || r.Shell != "" {
		r = sandboxes.ExecRequest{Argv: []string{"true"}, Background: r.Background}
	}
	return h.Manager.Exec(ctx, id, r, emit)
}

// FuzzAPI throws methods, paths and bodies at the handler: it never
// panics, never answers 500 to bad input, and every answer is JSON, a
// stream, a file or empty.
func FuzzAPI(f *testing.F) {
	for _, seed := range []struct{ method, path, body string }{
		{"GET", "/v1/health", ""},
		{"GET", "/openapi.json", ""},
		{"POST", "/v1/sandboxes", `{"labels": {"a": "b"}, "ttl": "1h"}`},
		{"POST", "/v1/sandboxes", `{"ttl": 5}`},
		{"GET", "/v1/sandboxes?label=a=b&label=c", ""},
		{"GET", "/v1/sandboxes/{id}", ""},
		{"DELETE", "/v1/sandboxes/nope", ""},
		{"POST", "/v1/sandboxes/{id}/extend", `{"ttl": "2h", "idleTimeout": "1m"}`},
		{"POST", "/v1/sandboxes/{id}/exec", `{"argv": ["true"]}`},
		{"POST", "/v1/sandboxes/{id}/exec?sse=1", `{"shell": "x", "background": true}`},
		{"GET", "/v1/sandboxes/{id}/execs/ex-1", ""},
		{"GET", "/v1/sandboxes/{id}/execs/ex-1/output?stdout=1&stderr=x&follow=0", ""},
		{"POST", "/v1/sandboxes/{id}/execs/ex-1/signal", `{"signal": "SIGTERM"}`},
		{"POST", "/v1/sandboxes/{id}/execs/ex-1/wait", ""},
		{"PUT", "/v1/sandboxes/{id}/files/a/b.txt?mode=0644", "hello"},
		{"GET", "/v1/sandboxes/{id}/files/a/b.txt", ""},
		{"GET", "/v1/sandboxes/{id}/files/../../etc/passwd", ""},
		{"GET", "/v1/sandboxes/{id}/stat/a", ""},
		{"GET", "/v1/sandboxes/{id}/ls/a%00", ""},
		{"DELETE", "/v1/sandboxes/{id}/files/a?recursive=1", ""},
		{"PATCH", "/v1/sandboxes", "{"},
	} {
		f.Add(seed.method, seed.path, []byte(seed.body))
	}
	fake := managertest.New(f, sandboxes.Options{})
	s, err := New(Options{Manager: harmless{fake}, Token: testToken})
	if err != nil {
		f.Fatal(err)
	}
	sb, err := fake.Create(context.Background(), sandboxes.Spec{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, path string, body []byte) {
		path = strings.ReplaceAll(path, "{id}", sb.ID)
		req, err := http.NewRequest(method, "http://sandbox"+path, bytes.NewReader(body))
		if err != nil || req.URL.Host != "sandbox" {
			return
		}
		if !strings.HasPrefix(req.URL.Path, "/") {
			return // not something an HTTP server receives
		}
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		res := rec.Result()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode == http.StatusInternalServerError {
			t.Fatalf("%s %q: 500: %s", method, path, b)
		}
		switch ct := res.Header.Get("Content-Type"); ct {
		case "application/json":
			if !json.Valid(b) {
				t.Fatalf("%s %q: invalid JSON answer %q", method, path, b)
			}
		case "application/x-ndjson":
			for _, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
				if len(line) > 0 && !json.Valid(line) {
					t.Fatalf("%s %q: invalid NDJSON line %q", method, path, line)
				}
			}
		case "text/event-stream", "application/octet-stream":
		case "":
			if res.StatusCode != http.StatusNoContent || len(b) > 0 {
				t.Fatalf("%s %q: status %d without a Content-Type: %q", method, path, res.StatusCode, b)
			}
		default:
			t.Fatalf("%s %q: Content-Type %q", method, path, ct)
		}
		if res.StatusCode >= 400 {
			var eb ErrorBody
			if err := json.Unmarshal(b, &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
				t.Fatalf("%s %q: status %d with a body that is not an error: %q", method, path, res.StatusCode, b)
			}
		}
		// Keep the workspace from filling up.
		if l, _ := fake.ListFiles(context.Background(), sb.ID, "."); len(l) > 100 {
			for _, fi := range l {
				fake.RemoveFile(context.Background(), sb.ID, fi.Path, true)
			}
		}
	})
}
