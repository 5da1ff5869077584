package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// TestTransport: a transport's requests reach its handler with the
// identity it (or the server) authenticated, the server's own errors are
// in its shape, a public request takes no slot, and the API's requests
// are the API's.
func TestTransport(t *testing.T) {
	const token = "transport-test-token-0123456789"
	release := make(chan struct{})
	own := Transport{
		Name:  "own-auth",
		Match: func(r *http.Request) bool { return r.Header.Get("X-Own") != "" },
		Authenticate: func(r *http.Request) (sandboxes.Identity, bool, error) {
			switch v := r.Header.Get("X-Own"); v {
			case "public":
				return sandboxes.Identity{}, true, nil
			case "bad":
				return sandboxes.Identity{}, false, sandboxes.Errorf(sandboxes.CodeAuth, "bad own token")
			default:
				return sandboxes.Identity{Name: v}, false, nil
			}
		},
		WriteError: func(w http.ResponseWriter, r *http.Request, status int, err *sandboxes.Error) {
			w.WriteHeader(status)
			fmt.Fprintf(w, "own %d %s", status, err.Code)
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, ok := sandboxes.IdentityFrom(r.Context())
			if r.URL.Path == "/block" {
				<-release
			}
			fmt.Fprintf(w, "own handler %q %v", id.Name, ok)
		}),
	}
	shared := Transport{
		Name:       "server-auth",
		Match:      func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/other/") },
		WriteError: own.WriteError,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, _ := sandboxes.IdentityFrom(r.Context())
			fmt.Fprintf(w, "other handler %q", id.Name)
		}),
	}
	s, err := New(Options{Manager: managertest.New(t, sandboxes.Options{}), Token: token, MaxConcurrentPerClient: 1, Transports: []Transport{own, shared}})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string, h map[string]string) (int, string) {
		r := httptest.NewRequest("GET", path, nil)
		for k, v := range h {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	for _, c := range []struct {
		path string
		h    map[string]string
		code int
		body string
	}{
		{"/x", map[string]string{"X-Own": "alice"}, 200, `own handler "alice" true`},
		{"/x", map[string]string{"X-Own": "public"}, 200, `own handler "" false`},
		{"/x", map[string]string{"X-Own": "bad"}, 401, `own 401 unauthorized`},
		{"/other/x", nil, 401, `own 401 unauthorized`},
		{"/other/x", map[string]string{"X-API-Key": token}, 200, `other handler "token"`},
		{"/other/../x", map[string]string{"X-API-Key": token}, 400, `own 400 bad_request`},
	} {
		if code, body := get(c.path, c.h); code != c.code || body != c.body {
			t.Errorf("GET %s %v: %d %q, want %d %q", c.path, c.h, code, body, c.code, c.body)
		}
	}
	// The API's routes are as they were, errors in their shape.
	code, body := get("/v1/sandboxes", nil)
	var e ErrorBody
	if code != 401 || json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != sandboxes.CodeAuth {
		t.Errorf("GET /v1/sandboxes without a token: %d %s", code, body)
	}
	// The per-identity limit (1) holds for a transport's identity, in its
	// shape; a public request takes no slot.
	done := make(chan struct{})
	go func() {
		defer close(done)
		get("/block", map[string]string{"X-Own": "alice"})
	}()
	for {
		s.mu.Lock()
		n := s.perKey["alice"]
		s.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if code, body := get("/x", map[string]string{"X-Own": "alice"}); code != 429 || body != "own 429 limit_exceeded" {
		t.Errorf("over the limit: %d %q", code, body)
	}
	if code, _ := get("/x", map[string]string{"X-Own": "public"}); code != 200 {
		t.Errorf("a public request over the limit: %d", code)
	}
	close(release)
	<-done

	if _, err := New(Options{Manager: managertest.New(t, sandboxes.Options{}), Transports: []Transport{{Name: "half", Match: own.Match}}}); err == nil || !strings.Contains(err.Error(), "needs Match, WriteError and Handler") {
		t.Errorf("a transport without a handler: %v", err)
	}
}
