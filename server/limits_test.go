package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// TestLongPaths: a path longer than Linux takes (5,000 bytes of short
// names), or with one name over NAME_MAX, is a 400 that says so on every
// route that takes a workspace path, and a template or workflow file name
// as long is a 400 too, never a 404 or 500.
func TestLongPaths(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(sandboxes.Spec{})
	base := "/v1/sandboxes/" + sb.ID
	long := strings.Repeat("a/", 2500)[:5000]
	name := strings.Repeat("n", 300)
	for _, p := range []string{long, "dir/" + name} {
		for _, route := range []string{"PUT /files/", "GET /files/", "DELETE /files/", "GET /stat/", "GET /ls/"} {
			method, prefix, _ := strings.Cut(route, " ")
			var body any
			if method == "PUT" {
				body = "x"
			}
			e := wantErr(t, e.req(method, base+prefix+p, body), http.StatusBadRequest, sandboxes.CodeBadRequest, "the most is")
			if len(e.Message) > 300 {
				t.Errorf("%s: the message echoes the path: %d bytes", route, len(e.Message))
			}
		}
	}
	// At the limits exactly, the path is the manager's to judge (here:
	// no such file).
	atLimit := strings.Repeat("b/", sandboxes.MaxPathBytes/2-1)
	atLimit += strings.Repeat("c", sandboxes.MaxPathBytes-len(atLimit))
	wantErr(t, e.req("GET", base+"/stat/"+atLimit, nil), http.StatusNotFound, sandboxes.CodeNotFound)
	wantErr(t, e.req("GET", base+"/stat/"+strings.Repeat("n", sandboxes.MaxNameBytes), nil), http.StatusNotFound, sandboxes.CodeNotFound)
}
