package e2b

import (
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// TestControlPathsAreNotTheAPIs: no route of the REST API
// (server/testdata/routes.golden) is a request of the control API, and
// every path of the SDK's control calls is.
func TestControlPathsAreNotTheAPIs(t *testing.T) {
	b, err := os.ReadFile("../testdata/routes.golden")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pattern := strings.Fields(line)[0]
		if !strings.HasPrefix(pattern, "/") {
			pattern = strings.Fields(line)[1]
		}
		n++
		if isControl(httptest.NewRequest("GET", pattern, nil)) {
			t.Errorf("the REST route %s is on E2B's control paths", line)
		}
	}
	if n < 10 {
		t.Fatalf("read %d routes from routes.golden", n)
	}
	for _, p := range []string{"/v2/sandboxes", "/sandboxes/abc", "/sandboxes/abc/timeout", "/v2/sandboxes/abc/connect", "/snapshots", "/templates/x"} {
		if !isControl(httptest.NewRequest("GET", p, nil)) {
			t.Errorf("%s is not the control API's", p)
		}
	}
	r := httptest.NewRequest("GET", "/sandboxes/abc", nil)
	r.Header.Set("E2b-Sandbox-Id", "abc")
	if isControl(r) || !isEnvd(r) {
		t.Errorf("a request with E2b-Sandbox-Id is not envd's")
	}
}
