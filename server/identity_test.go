package server

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/internal/tenancytest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/sandboxes"
)

const (
	tokA     = "token-of-a-0123456789abcdef"
	tokB     = "token-of-b-0123456789abcdef"
	tokAdmin = "token-of-ops-0123456789abcdef"
)

func testIdentities(mod func(*Identity)) []Identity {
	ids := []Identity{
		{Identity: sandboxes.Identity{Name: "a"}, TokenSHA256: sha256.Sum256([]byte(tokA))},
		{Identity: sandboxes.Identity{Name: "b"}, TokenSHA256: sha256.Sum256([]byte(tokB))},
		{Identity: sandboxes.Identity{Name: "ops", Admin: true}, TokenSHA256: sha256.Sum256([]byte(tokAdmin))},
	}
	if mod != nil {
		for i := range ids {
			mod(&ids[i])
		}
	}
	return ids
}

// identityServer serves the real manager on the fake backend to the
// identities over httptest (TCP) and on a unix socket.
func identityServer(t *testing.T, o Options) (tcp string, sock string) {
	t.Helper()
	fake := managertest.New(t, sandboxes.Options{})
	o.Manager = fake
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	sock = filepath.Join(shortTemp(t), "api.sock")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() {
		hs.Close()
		s.Shutdown(context.Background())
	})
	return hs.URL, sock
}

func tokenClient(name, url, tok string) tenancytest.Client {
	return tenancytest.Client{Name: name, URL: url, HTTP: &http.Client{}, Header: http.Header{"Authorization": {"Bearer " + tok}}}
}

// TestIdentitiesKeptApart: on every route, B is answered about A's
// sandbox, execs and snapshots as about ones that do not exist; the
// admin, and the unix socket's root, see all; a user of the socket
// (uid-N) is kept apart too.
func TestIdentitiesKeptApart(t *testing.T) {
	url, sock := identityServer(t, Options{Identities: testIdentities(nil)})
	a, b, ops := tokenClient("a", url, tokA), tokenClient("b", url, tokB), tokenClient("ops", url, tokAdmin)
	tenancytest.Check(t, a, b, ops, tenancytest.Options{})
	// B with X-API-Key, E2B's header, is B too.
	bKey := tenancytest.Client{Name: "b", URL: url, HTTP: &http.Client{}, Header: http.Header{"X-Api-Key": {tokB}}}
	tenancytest.Check(t, a, bKey, ops, tenancytest.Options{})

	// The socket's peer is uid-N: the admin uid-0 when root, else a
	// user who sees only its own.
	unixC := tenancytest.Client{Name: fmt.Sprintf("uid-%d", os.Getuid()), URL: "http://sandbox", HTTP: unixClient(sock)}
	if os.Getuid() == 0 {
		tenancytest.Check(t, a, b, unixC, tenancytest.Options{})
		tenancytest.Check(t, unixC, b, ops, tenancytest.Options{})
	} else {
		tenancytest.Check(t, a, unixC, ops, tenancytest.Options{})
	}
}

// TestTokenIdentity: Options.Token (serve --token-file) is the user
// "token": it does not see the unix socket's sandboxes, nor they its,
// unless the socket's peer is root.
func TestTokenIdentity(t *testing.T) {
	url, sock := identityServer(t, Options{Token: testToken})
	tok := tokenClient(TokenIdentity, url, testToken)
	unixC := tenancytest.Client{Name: fmt.Sprintf("uid-%d", os.Getuid()), URL: "http://sandbox", HTTP: unixClient(sock)}
	sb := tenancytest.JSON[sandboxes.Info](t, unixC, "POST", "/v1/sandboxes", nil, 201)
	if st, _ := tok.Do(t, "GET", "/v1/sandboxes/"+sb.ID, nil); st != 404 {
		t.Errorf("the token's identity gets the socket's sandbox: %d", st)
	}
	mine := tenancytest.JSON[sandboxes.Info](t, tok, "POST", "/v1/sandboxes", nil, 201)
	if mine.Owner != TokenIdentity {
		t.Errorf("the token's sandbox is owned by %q", mine.Owner)
	}
	if _, err := New(Options{Manager: managertest.New(t, sandboxes.Options{}), Token: testToken, Identities: testIdentities(nil)}); err == nil {
		t.Error("New with a token and identities succeeded")
	}
}

// TestAuthHeaders: the token comes as a bearer token or X-API-Key; two
// different ones, a non-bearer Authorization and unknown tokens are 401.
func TestAuthHeaders(t *testing.T) {
	url, _ := identityServer(t, Options{Identities: testIdentities(nil)})
	for _, c := range []struct {
		hdr    map[string]string
		status int
	}{
		{map[string]string{"Authorization": "Bearer " + tokA}, 200},
		{map[string]string{"X-API-Key": tokA}, 200},
		{map[string]string{"Authorization": "Bearer " + tokA, "X-API-Key": tokA}, 200},
		{map[string]string{"Authorization": "Bearer " + tokA, "X-API-Key": tokB}, 401},
		{map[string]string{"Authorization": "Basic " + tokA}, 401},
		{map[string]string{"Authorization": "Basic x", "X-API-Key": tokA}, 401},
		{map[string]string{"Authorization": "Bearer " + tokA + "x"}, 401},
		{map[string]string{"X-API-Key": ""}, 401},
		{map[string]string{}, 401},
	} {
		req, _ := http.NewRequest("GET", url+"/v1/sandboxes", nil)
		for k, v := range c.hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%v: %d, want %d", c.hdr, resp.StatusCode, c.status)
		}
	}
}

// stall sends n requests of tok whose bodies never arrive (the headers
// promise 1000 bytes, 10 come), and returns their connections.
func stall(t *testing.T, url, tok string, n int) []net.Conn {
	t.Helper()
	addr := strings.TrimPrefix(url, "http://")
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"labels\":", tok)
		conns = append(conns, c)
	}
	return conns
}

// TestStalledBodiesPerIdentity: 16 requests of A whose bodies stall take
// A's 16 places, so A's next is 429 naming the limit, while B's requests
// go on being answered at once. (Before identities every TCP client was
// one: 16 stalled bodies locked them all out.)
func TestStalledBodiesPerIdentity(t *testing.T) {
	url, _ := identityServer(t, Options{Identities: testIdentities(nil)})
	a, b := tokenClient("a", url, tokA), tokenClient("b", url, tokB)
	stall(t, url, tokA, DefaultMaxConcurrentPerClient)
	// Wait until the server holds all 16, asking seldom: a request of A
	// in flight when the last stalled one arrives would take its place.
	deadline := time.Now().Add(10 * time.Second)
	for {
		time.Sleep(200 * time.Millisecond)
		st, body := a.Do(t, "GET", "/v1/sandboxes", nil)
		if st == 429 {
			if !strings.Contains(string(body), "identity a") || !strings.Contains(string(body), "max_in_flight") {
				t.Errorf("A's 429 does not name the identity and the limit: %s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A's 17th request: %d %s, want 429 once its 16 stalled ones are in", st, body)
		}
	}
	for i := range 20 {
		start := time.Now()
		tenancytest.JSON[SandboxList](t, b, "GET", "/v1/sandboxes", nil, 200)
		if i == 0 {
			tenancytest.JSON[sandboxes.Info](t, b, "POST", "/v1/sandboxes", nil, 201)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("B's request %d took %s while A's bodies stall", i, d)
		}
	}
}

// TestIdentityLimits: an identity's max_sandboxes and max_in_flight are
// its own: A at its limit is 429 naming it, B is not held back.
func TestIdentityLimits(t *testing.T) {
	url, _ := identityServer(t, Options{Identities: testIdentities(func(id *Identity) {
		id.MaxSandboxes, id.MaxInFlight = 1, 2
	})})
	a, b := tokenClient("a", url, tokA), tokenClient("b", url, tokB)
	tenancytest.JSON[sandboxes.Info](t, a, "POST", "/v1/sandboxes", nil, 201)
	st, body := a.Do(t, "POST", "/v1/sandboxes", nil)
	if st != 429 || !strings.Contains(string(body), "max_sandboxes") || !strings.Contains(string(body), "identity a") {
		t.Errorf("A's second sandbox: %d %s, want 429 naming max_sandboxes", st, body)
	}
	tenancytest.JSON[sandboxes.Info](t, b, "POST", "/v1/sandboxes", nil, 201)
	stall(t, url, tokA, 2)
	deadline := time.Now().Add(10 * time.Second)
	for {
		time.Sleep(200 * time.Millisecond)
		if st, _ := a.Do(t, "GET", "/v1/sandboxes", nil); st == 429 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("A's max_in_flight 2 did not hold with 2 stalled requests")
		}
	}
	tenancytest.JSON[SandboxList](t, b, "GET", "/v1/sandboxes", nil, 200)
}

// TestCheckIdentities: New refuses identities that would mix callers.
func TestCheckIdentities(t *testing.T) {
	fake := managertest.New(t, sandboxes.Options{})
	h := sha256.Sum256([]byte("x"))
	for name, ids := range map[string][]Identity{
		"bad name":       {{Identity: sandboxes.Identity{Name: "A B"}, TokenSHA256: h}},
		"unix name":      {{Identity: sandboxes.Identity{Name: "uid-0"}, TokenSHA256: h}},
		"same name":      {{Identity: sandboxes.Identity{Name: "a"}, TokenSHA256: h}, {Identity: sandboxes.Identity{Name: "a"}, TokenSHA256: sha256.Sum256([]byte("y"))}},
		"same token":     {{Identity: sandboxes.Identity{Name: "a"}, TokenSHA256: h}, {Identity: sandboxes.Identity{Name: "b"}, TokenSHA256: h}},
		"no token":       {{Identity: sandboxes.Identity{Name: "a"}}},
		"an empty token": {{Identity: sandboxes.Identity{Name: "a"}, TokenSHA256: sha256.Sum256(nil)}},
	} {
		if _, err := New(Options{Manager: fake, Identities: ids}); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

// TestUnixUserIdentity: a socket the operator opened to others gives
// each uid its own identity: nobody (uid 65534) sees none of root's
// sandboxes and owns what it creates; root, an admin, sees it.
func TestUnixUserIdentity(t *testing.T) {
	testtier.Root(t)
	testtier.Command(t, "curl", "curl", "install Debian's curl")
	_, sock := identityServer(t, Options{Identities: testIdentities(nil)})
	os.Chmod(filepath.Dir(sock), 0o755)
	os.Chmod(sock, 0o666)
	root := tenancytest.Client{Name: "uid-0", URL: "http://sandbox", HTTP: unixClient(sock)}
	sb := tenancytest.JSON[sandboxes.Info](t, root, "POST", "/v1/sandboxes", nil, 201)
	asNobody := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("curl", append([]string{"-s", "-w", " %{http_code}", "--unix-socket", sock}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("curl as nobody %v: %v %s", args, err, out)
		}
		return string(out)
	}
	if out := asNobody("http://sandbox/v1/sandboxes"); out != "{\"sandboxes\":[]}\n 200" {
		t.Errorf("nobody's list: %s", out)
	}
	if out := asNobody("http://sandbox/v1/sandboxes/" + sb.ID); !strings.HasSuffix(out, " 404") {
		t.Errorf("nobody gets root's sandbox: %s", out)
	}
	out := asNobody("-X", "POST", "http://sandbox/v1/sandboxes", "-d", "{}")
	if !strings.HasSuffix(out, " 201") || !strings.Contains(out, `"owner":"uid-65534"`) {
		t.Fatalf("nobody's create: %s", out)
	}
	l := tenancytest.JSON[SandboxList](t, root, "GET", "/v1/sandboxes", nil, 200)
	if len(l.Sandboxes) != 2 {
		t.Errorf("root lists %d sandboxes, want its own and nobody's", len(l.Sandboxes))
	}
}
