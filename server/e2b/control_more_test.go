package e2b_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
)

// TestUser: E2B's user is "user" (the default, or named); root is
// refused as permission denied, an unknown name as unauthenticated, on
// the RPC calls and on /files.
func TestUser(t *testing.T) {
	base := serve(t)
	c := create(t, base, `{"templateID":"base"}`)
	basic := func(u string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(u+":")) }
	rpc := func(auth string) (int, string) {
		h := with(envd(c), "Content-Type", "application/json")
		if auth != "" {
			h["Authorization"] = auth
		}
		code, _, b := do(t, base, call{"POST", "/filesystem.Filesystem/ListDir", h, `{"path":"/home/user"}`})
		return code, string(b)
	}
	for _, tc := range []struct {
		auth string
		code int
		want string
	}{
		{"", http.StatusOK, ""},
		{basic("user"), http.StatusOK, ""},
		{basic("root"), http.StatusForbidden, `permission_denied`},
		{basic("alice"), http.StatusUnauthorized, `user \"alice\"`},
		{"Bearer x", http.StatusUnauthorized, `Basic`},
	} {
		code, b := rpc(tc.auth)
		if code != tc.code || !strings.Contains(b, tc.want) {
			t.Errorf("ListDir with Authorization %q: %d %s, want %d with %s", tc.auth, code, b, tc.code, tc.want)
		}
	}
	for _, tc := range []struct {
		user string
		code int
	}{{"user", http.StatusOK}, {"root", http.StatusForbidden}, {"bob", http.StatusUnauthorized}} {
		code, _, b := do(t, base, call{"POST", "/files?path=a.txt&username=" + tc.user, with(envd(c), "Content-Type", "application/octet-stream"), "hi"})
		if code != tc.code {
			t.Errorf("write a file as %q: %d %s, want %d", tc.user, code, b, tc.code)
		}
	}
}

// TestNetworkFields: what create takes of E2B's network and what it
// refuses, before the Manager is asked.
func TestNetworkFields(t *testing.T) {
	base := serve(t)
	h := map[string]string{"X-API-Key": key, "Content-Type": "application/json"}
	for _, tc := range []struct {
		body string
		code int
		want string
	}{
		{`{"network":{"allowPublicTraffic":true}}`, http.StatusNotImplemented, "allowPublicTraffic"},
		{`{"network":{"maskRequestHost":"x"}}`, http.StatusNotImplemented, "maskRequestHost"},
		{`{"allow_internet_access":true,"network":{"denyOut":["1.2.3.4"]}}`, http.StatusNotImplemented, "denyOut"},
		{`{"network":{"rules":{}}}`, http.StatusBadRequest, "rules"},
	} {
		code, _, b := do(t, base, call{"POST", "/v2/sandboxes", h, tc.body})
		if code != tc.code || !strings.Contains(string(b), tc.want) {
			t.Errorf("create %s: %d %s, want %d with %s", tc.body, code, b, tc.code, tc.want)
		}
	}
	// Without a network, denyOut says nothing more: the sandbox is made.
	create(t, base, `{"allow_internet_access":false,"network":{"denyOut":["0.0.0.0/0"],"allowPublicTraffic":false}}`)
}

// TestUpdateNetwork: updateNetwork asks the Manager's NetworkManager,
// which the test manager does not offer (501, saying so); a sandbox that
// is not there is 404 first.
func TestUpdateNetwork(t *testing.T) {
	base := serve(t)
	c := create(t, base, `{"templateID":"base"}`)
	h := map[string]string{"X-API-Key": key, "Content-Type": "application/json"}
	code, _, b := do(t, base, call{"PUT", "/sandboxes/" + c.SandboxID + "/network", h, `{"allowOut":["example.com:443"]}`})
	if code != http.StatusNotImplemented || !strings.Contains(string(b), "cannot change a sandbox's network") {
		t.Errorf("updateNetwork with a manager that cannot: %d %s, want 501 saying so", code, b)
	}
	if code, _, b := do(t, base, call{"PUT", "/sandboxes/nope/network", h, `{"allowOut":["example.com:443"]}`}); code != http.StatusNotFound {
		t.Errorf("updateNetwork of no sandbox: %d %s, want 404", code, b)
	}
}
