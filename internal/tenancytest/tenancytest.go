// Package tenancytest is test support: one check that a server keeps the
// identities apart on every REST route, run against the real manager on
// the fake backend (package server's tests) and against the real
// `agentsandbox serve` (cmd/agentsandbox's root tests), so that both hold
// to the same promise.
package tenancytest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// Client is one identity's way to the server.
type Client struct {
	Name string // the identity's name, as Info.Owner shows it
	URL  string // http://HOST:PORT, or http://sandbox for a unix socket
	HTTP *http.Client
	// Header is sent with every request (its token).
	Header http.Header
}

// Do sends a request; body is nil, a string or a value sent as JSON. It
// returns the status and the answer's bytes.
func (c Client) Do(t testing.TB, method, path string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, c.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range c.Header {
		req.Header[k] = v
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		t.Fatalf("%s: %s %s: %v", c.Name, method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// JSON sends a request that must answer status, and decodes the answer.
func JSON[T any](t testing.TB, c Client, method, path string, body any, status int) T {
	t.Helper()
	got, b := c.Do(t, method, path, body)
	if got != status {
		t.Fatalf("%s: %s %s: %d, want %d: %s", c.Name, method, path, got, status, b)
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %s %s: decode %s: %v", c.Name, method, path, b, err)
	}
	return v
}

// Secret is the content of the file Check has a write: its own.
func Secret(name string) string { return "SECRET of " + name + "\n" }

// Options of Check.
type Options struct {
	// Network says the manager changes a running sandbox's network (the
	// real one does; the fake answers 501 on every sandbox).
	Network bool
}

// Check has a create a sandbox, write a file, run a foreground and a
// background command and take a snapshot, and b create its own; then
// every route b can name a's things by answers b exactly as it answers a
// sandbox, exec or snapshot that does not exist (404, the same message
// with the id in it), b's list leaves a's out (by labels too), b cannot
// restore or fork from a's snapshot, a still has all of it, and admin
// sees and acts on both. It returns a's sandbox and snapshot.
func Check(t *testing.T, a, b, admin Client, o Options) (sandboxes.Info, sandboxes.SnapshotInfo) {
	t.Helper()
	sbA := JSON[sandboxes.Info](t, a, "POST", "/v1/sandboxes", sandboxes.Spec{Labels: map[string]string{"team": "a"}}, 201)
	if sbA.Owner != a.Name {
		t.Errorf("%s's sandbox is owned by %q", a.Name, sbA.Owner)
	}
	base := "/v1/sandboxes/" + sbA.ID
	// The content is a's own: a snapshot of the same tree by another
	// identity would be that one's too.
	secret := Secret(a.Name)
	JSON[sandboxes.FileInfo](t, a, "PUT", base+"/files/secret.txt", secret, 200)
	if st, out := a.Do(t, "POST", base+"/exec", sandboxes.ExecRequest{Argv: []string{"cat", "secret.txt"}}); st != 200 || !bytes.Contains(out, []byte(strings.TrimSpace(secret))) {
		t.Fatalf("%s's exec: %d %s", a.Name, st, out)
	}
	bg := JSON[sandboxes.ExecInfo](t, a, "POST", base+"/exec", sandboxes.ExecRequest{Shell: "echo A-OUTPUT; sleep 60", Background: true}, 202)
	snap := JSON[sandboxes.SnapshotInfo](t, a, "POST", base+"/snapshots", sandboxes.SnapshotRequest{Label: "a's"}, 201)
	sbB := JSON[sandboxes.Info](t, b, "POST", "/v1/sandboxes", nil, 201)

	// What b gets for a's ids must be what it gets for ids nobody has.
	const ghostSandbox = "0000000000000000"
	ghostSnap := "sha256:" + strings.Repeat("0", 63) + "1"
	exec := sandboxes.ExecRequest{Argv: []string{"cat", "secret.txt"}}
	routes := []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/sandboxes/ID", nil},
		{"POST", "/v1/sandboxes/ID/extend", map[string]string{"ttl": "2h"}},
		{"POST", "/v1/sandboxes/ID/exec", exec},
		{"POST", "/v1/sandboxes/ID/exec", sandboxes.ExecRequest{Argv: []string{"true"}, Background: true}},
		{"GET", "/v1/sandboxes/ID/execs/EXEC", nil},
		{"GET", "/v1/sandboxes/ID/execs/EXEC/output?stdout=0&stderr=0", nil},
		{"POST", "/v1/sandboxes/ID/execs/EXEC/signal", map[string]string{"signal": "SIGKILL"}},
		{"POST", "/v1/sandboxes/ID/execs/EXEC/wait", nil},
		{"PUT", "/v1/sandboxes/ID/files/secret.txt", "B-WAS-HERE\n"},
		{"GET", "/v1/sandboxes/ID/files/secret.txt", nil},
		{"DELETE", "/v1/sandboxes/ID/files/secret.txt", nil},
		{"GET", "/v1/sandboxes/ID/stat/secret.txt", nil},
		{"GET", "/v1/sandboxes/ID/ls", nil},
		{"GET", "/v1/sandboxes/ID/ls/sub", nil},
		{"POST", "/v1/sandboxes/ID/snapshots", nil},
		{"GET", "/v1/sandboxes/ID/snapshots", nil},
		{"POST", "/v1/sandboxes/ID/restore", sandboxes.RestoreRequest{Snapshot: "SNAP"}},
		{"DELETE", "/v1/sandboxes/ID", nil},
	}
	if o.Network {
		routes = append(routes,
			struct {
				method, path string
				body         any
			}{"GET", "/v1/sandboxes/ID/network", nil},
			struct {
				method, path string
				body         any
			}{"POST", "/v1/sandboxes/ID/network", sandboxes.NetworkUpdate{Grant: []string{"example.com:443"}}})
	}
	fill := func(p, id, execID string) string {
		return strings.NewReplacer("ID", id, "EXEC", execID).Replace(p)
	}
	body := func(v any, snapID string) any {
		if r, ok := v.(sandboxes.RestoreRequest); ok {
			r.Snapshot = snapID
			return r
		}
		return v
	}
	for _, r := range routes {
		st, got := b.Do(t, r.method, fill(r.path, sbA.ID, bg.ID), body(r.body, snap.ID))
		gst, ghost := b.Do(t, r.method, fill(r.path, ghostSandbox, bg.ID), body(r.body, ghostSnap))
		if st != 404 || gst != 404 {
			t.Errorf("%s: %s %s of %s's sandbox: %d %s (an unknown id: %d %s), want 404", b.Name, r.method, r.path, a.Name, st, got, gst, ghost)
			continue
		}
		if string(bytes.ReplaceAll(got, []byte(sbA.ID), []byte(ghostSandbox))) != string(ghost) {
			t.Errorf("%s: %s %s: %s's sandbox answers %s, an unknown one %s: the answers differ", b.Name, r.method, r.path, a.Name, got, ghost)
		}
		if bytes.Contains(got, []byte("SECRET")) || bytes.Contains(got, []byte("A-OUTPUT")) {
			t.Errorf("%s: %s %s shows %s's data: %s", b.Name, r.method, r.path, a.Name, got)
		}
	}
	// a's snapshot, from b's own sandbox and as a fork.
	for _, r := range []struct {
		method, path string
		body         func(string) any
	}{
		{"POST", "/v1/sandboxes/" + sbB.ID + "/restore", func(s string) any { return sandboxes.RestoreRequest{Snapshot: s} }},
		{"POST", "/v1/sandboxes", func(s string) any { return sandboxes.Spec{FromSnapshot: s} }},
	} {
		st, got := b.Do(t, r.method, r.path, r.body(snap.ID))
		_, ghost := b.Do(t, r.method, r.path, r.body(ghostSnap))
		if st != 404 || strings.ReplaceAll(string(got), snap.ID, ghostSnap) != string(ghost) {
			t.Errorf("%s: %s %s with %s's snapshot: %d %s, want the 404 of an unknown snapshot: %s", b.Name, r.method, r.path, a.Name, st, got, ghost)
		}
	}
	for _, q := range []string{"", "?label=team=a"} {
		l := JSON[struct{ Sandboxes []sandboxes.Info }](t, b, "GET", "/v1/sandboxes"+q, nil, 200)
		for _, s := range l.Sandboxes {
			if s.ID == sbA.ID || s.Owner != b.Name {
				t.Errorf("%s's list%s shows %+v", b.Name, q, s)
			}
		}
	}

	// a still has its sandbox whole: b changed nothing.
	if st, got := a.Do(t, "GET", base+"/files/secret.txt", nil); st != 200 || string(got) != secret {
		t.Errorf("%s's file after %s's attempts: %d %q", a.Name, b.Name, st, got)
	}
	if x := JSON[sandboxes.ExecInfo](t, a, "GET", base+"/execs/"+bg.ID, nil, 200); !x.Running {
		t.Errorf("%s's background exec after %s's signal: %+v", a.Name, b.Name, x)
	}

	// The admin sees both and acts on a's.
	l := JSON[struct{ Sandboxes []sandboxes.Info }](t, admin, "GET", "/v1/sandboxes", nil, 200)
	var owners []string
	for _, s := range l.Sandboxes {
		if s.ID == sbA.ID || s.ID == sbB.ID {
			owners = append(owners, s.Owner)
		}
	}
	slices.Sort(owners)
	if want := slices.Sorted(slices.Values([]string{a.Name, b.Name})); !slices.Equal(owners, want) {
		t.Errorf("the admin's list shows owners %v of the two sandboxes, want %v", owners, want)
	}
	if st, got := admin.Do(t, "GET", base+"/files/secret.txt", nil); st != 200 || string(got) != secret {
		t.Errorf("the admin reads %s's file: %d %q", a.Name, st, got)
	}
	fork := JSON[sandboxes.Info](t, admin, "POST", "/v1/sandboxes", sandboxes.Spec{FromSnapshot: snap.ID}, 201)
	if fork.Owner != admin.Name {
		t.Errorf("the admin's fork is owned by %q", fork.Owner)
	}
	JSON[sandboxes.Info](t, admin, "DELETE", "/v1/sandboxes/"+fork.ID, nil, 200)
	if st, got := a.Do(t, "POST", base+"/execs/"+bg.ID+"/signal", map[string]string{"signal": "SIGKILL"}); st != 204 {
		t.Errorf("%s signals its background exec: %d %s", a.Name, st, got)
	}
	return sbA, snap
}
