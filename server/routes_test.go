package server

import (
	goflag "flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/sandboxes"
)

var update = goflag.Bool("update", false, "rewrite testdata/routes.golden from the registered routes")

// routeTable is the server's route table as text: one line per
// registered pattern, in the order of registration, with what the
// router attaches to it. Identity is "required" when a request of the
// pattern without a token is answered 401 (s must have no unix peer); a
// public route takes no part in the per-identity limit of requests in
// flight; an extra route (Options.Extra) answers for itself, the API's
// routes answer errors as JSON.
func routeTable(s *Server) string {
	var b strings.Builder
	b.WriteString("# pattern\tidentity\tlimit\tanswers\n")
	for _, p := range s.patterns {
		identity, limit, answers := "required", "per-identity", "api"
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, sampleRequest(p))
		if w.Code != http.StatusUnauthorized {
			identity = fmt.Sprintf("none(%d)", w.Code)
		}
		if public[p] {
			limit = "public"
		}
		if slices.Contains(s.extra, p) {
			answers = "extra"
		}
		fmt.Fprintf(&b, "%s\t%s\t%s\t%s\n", p, identity, limit, answers)
	}
	return b.String()
}

var wildcard = regexp.MustCompile(`\{([A-Za-z]+)(\.\.\.)?\}`)

// sampleRequest is a request the pattern p matches: each wildcard a
// segment of its own name, a {name...} one two segments.
func sampleRequest(p string) *http.Request {
	method, path, ok := strings.Cut(p, " ")
	if !ok {
		method, path = http.MethodGet, p
	}
	path = wildcard.ReplaceAllStringFunc(path, func(w string) string {
		m := wildcard.FindStringSubmatch(w)
		if m[2] != "" {
			return m[1] + "/" + m[1]
		}
		return m[1]
	})
	return httptest.NewRequest(method, path, nil)
}

// TestRoutesGolden: the route table is testdata/routes.golden, and the
// mux sends a request of each pattern to that pattern (no route shadows
// another). Moving a route's registration must not change either.
func TestRoutesGolden(t *testing.T) {
	s, err := New(Options{Manager: managertest.New(t, sandboxes.Options{}), Extra: map[string]http.Handler{"/mcp": http.NotFoundHandler()}})
	if err != nil {
		t.Fatal(err)
	}
	got := routeTable(s)
	golden := filepath.Join("testdata", "routes.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v: run go test ./server -run TestRoutesGolden -update to write it", err)
	}
	if got != string(want) {
		t.Errorf("the route table differs from %s (run with -update only if the change is meant):\n--- got\n%s--- want\n%s", golden, got, want)
	}
	for _, p := range s.patterns {
		r := sampleRequest(p)
		if _, matched := s.mux.Handler(r); matched != p {
			t.Errorf("%s %s goes to pattern %q, want %q", r.Method, r.URL.Path, matched, p)
		}
	}
	if n := len(s.patterns); n != len(slices.Compact(slices.Sorted(slices.Values(s.patterns)))) {
		t.Errorf("a pattern is registered twice: %v", s.patterns)
	}
}
