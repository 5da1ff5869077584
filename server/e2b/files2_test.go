package e2b_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server"
	"github.com/agentsandbox/agentsandbox/server/e2b"
)

// serveManager is serve with the Manager kept, to reach the workspace
// on the host as a job would (planting symlinks).
func serveManager(t *testing.T) (string, *managertest.Manager) {
	t.Helper()
	m := managertest.New(t, sandboxes.Options{})
	s, err := server.New(server.Options{Manager: m, Token: key, Transports: e2b.New(m, e2b.Options{}).Transports()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs.URL, m
}

func fsCall(t *testing.T, base string, c created, method, body string) (int, string) {
	t.Helper()
	code, _, b := do(t, base, call{"POST", "/filesystem.Filesystem/" + method, with(envd(c), "Content-Type", "application/json"), body})
	return code, string(b)
}

func TestMakeDirMove(t *testing.T) {
	base, m := serveManager(t)
	c := create(t, base, `{"templateID":"base"}`)
	ws := m.Dir(context.Background(), c.SandboxID)

	code, b := fsCall(t, base, c, "MakeDir", `{"path":"a/b/c"}`)
	if code != http.StatusOK || !strings.Contains(b, `"path":"/home/user/a/b/c"`) || !strings.Contains(b, `"type":"FILE_TYPE_DIRECTORY"`) || !strings.Contains(b, `"permissions":"drwxr-xr-x"`) {
		t.Fatalf("MakeDir: %d %s", code, b)
	}
	if fi, err := os.Stat(filepath.Join(ws, "a/b/c")); err != nil || !fi.IsDir() {
		t.Fatalf("a/b/c on the host: %v %v", fi, err)
	}
	if code, b = fsCall(t, base, c, "MakeDir", `{"path":"/home/user/a/b"}`); code != http.StatusConflict || !strings.Contains(b, `"code":"already_exists"`) {
		t.Fatalf("MakeDir of a directory that exists: %d %s", code, b)
	}
	if err := os.WriteFile(filepath.Join(ws, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, b = fsCall(t, base, c, "MakeDir", `{"path":"f"}`); code == http.StatusOK || strings.Contains(b, `"already_exists"`) {
		t.Fatalf("MakeDir over a file: %d %s", code, b)
	}

	// Move: a file, with the destination's parents made; never over what
	// exists; a directory never into itself.
	code, b = fsCall(t, base, c, "Move", `{"source":"f","destination":"/home/user/x/y/g"}`)
	if code != http.StatusOK || !strings.Contains(b, `"path":"/home/user/x/y/g"`) || !strings.Contains(b, `"type":"FILE_TYPE_FILE"`) {
		t.Fatalf("Move: %d %s", code, b)
	}
	if got, err := os.ReadFile(filepath.Join(ws, "x/y/g")); err != nil || string(got) != "x" {
		t.Fatalf("x/y/g on the host: %q %v", got, err)
	}
	if code, b = fsCall(t, base, c, "Move", `{"source":"x/y/g","destination":"a"}`); code != http.StatusConflict || !strings.Contains(b, `"already_exists"`) {
		t.Fatalf("Move onto a directory that exists: %d %s", code, b)
	}
	if code, b = fsCall(t, base, c, "Move", `{"source":"a","destination":"a/b/c/d"}`); code != http.StatusBadRequest {
		t.Fatalf("Move into itself: %d %s", code, b)
	}
	if code, b = fsCall(t, base, c, "Move", `{"source":"nope","destination":"n2"}`); code != http.StatusNotFound {
		t.Fatalf("Move of nothing: %d %s", code, b)
	}

	// The attacker's view: out of the workspace by name, and through a
	// symlink the job planted.
	out := t.TempDir()
	if err := os.Symlink(out, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ method, body string }{
		{"MakeDir", `{"path":"../../escape"}`},
		{"MakeDir", `{"path":"/tmp/escape"}`},
		{"MakeDir", `{"path":"link/escape"}`},
		{"Move", `{"source":"x/y/g","destination":"../../g"}`},
		{"Move", `{"source":"x/y/g","destination":"/etc/g"}`},
		{"Move", `{"source":"x/y/g","destination":"link/g"}`},
		{"Move", `{"source":"/etc/passwd","destination":"p"}`},
		{"Move", `{"source":"/home/user","destination":"w"}`},
	} {
		code, b := fsCall(t, base, c, tc.method, tc.body)
		if code != http.StatusBadRequest {
			t.Errorf("%s %s: %d %s", tc.method, tc.body, code, b)
		}
	}
	if names, _ := os.ReadDir(out); len(names) != 0 {
		t.Fatalf("the symlink's target was written to: %v", names)
	}
	// A symlink moves itself, never what it points to.
	if code, b = fsCall(t, base, c, "Move", `{"source":"link","destination":"link2"}`); code != http.StatusOK || !strings.Contains(b, `"type":"FILE_TYPE_SYMLINK"`) || !strings.Contains(b, `"symlinkTarget":"`+out+`"`) {
		t.Fatalf("Move of a symlink: %d %s", code, b)
	}

	// Stat: owner, group and the symlink's target, never followed.
	code, b = fsCall(t, base, c, "Stat", `{"path":"link2"}`)
	if code != http.StatusOK || !strings.Contains(b, `"symlinkTarget":"`+out+`"`) || !strings.Contains(b, `"type":"FILE_TYPE_SYMLINK"`) {
		t.Fatalf("Stat of a symlink: %d %s", code, b)
	}
	code, b = fsCall(t, base, c, "Stat", `{"path":"a"}`)
	if code != http.StatusOK || !strings.Contains(b, `"owner":"user"`) || !strings.Contains(b, `"group":"user"`) {
		t.Fatalf("Stat of a directory the API made: %d %s", code, b)
	}
}

// watch opens a WatchDir stream and returns a reader of its envelopes.
func watch(t *testing.T, base string, c created, req string) (*bufio.Reader, func()) {
	t.Helper()
	var body bytes.Buffer
	body.Write([]byte{0, 0, 0, 0, 0})
	binary.BigEndian.PutUint32(body.Bytes()[1:], uint32(len(req)))
	body.WriteString(req)
	ctx, cancel := context.WithCancel(context.Background())
	hr, err := http.NewRequestWithContext(ctx, "POST", base+"/filesystem.Filesystem/WatchDir", &body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range with(envd(c), "Content-Type", "application/connect+json", "Keepalive-Ping-Interval", "1") {
		hr.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("WatchDir: %d", resp.StatusCode)
	}
	return bufio.NewReader(resp.Body), func() { cancel(); resp.Body.Close() }
}

// next is the stream's next envelope: its flags and message.
func next(t *testing.T, r *bufio.Reader) (byte, string) {
	t.Helper()
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		t.Fatalf("the watch stream broke: %v", err)
	}
	msg := make([]byte, binary.BigEndian.Uint32(head[1:]))
	if _, err := io.ReadFull(r, msg); err != nil {
		t.Fatal(err)
	}
	return head[0], string(msg)
}

// events reads the stream until it has seen every want (in order),
// skipping keepalives and other events, within 10 s.
func events(t *testing.T, r *bufio.Reader, want ...string) {
	t.Helper()
	done := make(chan struct{})
	timer := time.AfterFunc(10*time.Second, func() { close(done) })
	defer timer.Stop()
	var seen []string
	for len(want) > 0 {
		select {
		case <-done:
			t.Fatalf("still waiting for %q; saw %q", want, seen)
		default:
		}
		flags, msg := next(t, r)
		if flags&2 != 0 {
			t.Fatalf("the stream ended, waiting for %q: %s (saw %q)", want, msg, seen)
		}
		seen = append(seen, msg)
		if strings.Contains(msg, want[0]) {
			want = want[1:]
		}
	}
}

func TestWatchDir(t *testing.T) {
	base, m := serveManager(t)
	c := create(t, base, `{"templateID":"base"}`)
	ws := m.Dir(context.Background(), c.SandboxID)
	if err := os.MkdirAll(filepath.Join(ws, "w/sub"), 0o755); err != nil {
		t.Fatal(err)
	}

	r, stop := watch(t, base, c, `{"path":"/home/user/w","recursive":true,"includeEntry":true}`)
	defer stop()
	if _, msg := next(t, r); msg != `{"start":{}}` {
		t.Fatalf("the first message: %s", msg)
	}
	code, _, b := do(t, base, call{"POST", "/files?path=w/sub/new.txt", with(envd(c), "Content-Type", "application/octet-stream"), "hi"})
	if code != http.StatusOK {
		t.Fatalf("write: %d %s", code, b)
	}
	events(t, r, `"name":"sub/new.txt","type":"EVENT_TYPE_CREATE"`)
	if err := os.WriteFile(filepath.Join(ws, "w/direct"), []byte("job"), 0o644); err != nil {
		t.Fatal(err)
	}
	events(t, r, `"name":"direct","type":"EVENT_TYPE_CREATE"`, `"name":"direct","type":"EVENT_TYPE_WRITE","entry":{"name":"direct"`)
	// A directory made after the watch began is watched too.
	if code, b := fsCall(t, base, c, "MakeDir", `{"path":"w/later"}`); code != http.StatusOK {
		t.Fatalf("MakeDir: %d %s", code, b)
	}
	events(t, r, `"name":"later","type":"EVENT_TYPE_CREATE"`)
	if err := os.WriteFile(filepath.Join(ws, "w/later/deep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	events(t, r, `"name":"later/deep","type":"EVENT_TYPE_CREATE"`)
	if code, b := fsCall(t, base, c, "Move", `{"source":"w/direct","destination":"w/moved"}`); code != http.StatusOK {
		t.Fatalf("Move: %d %s", code, b)
	}
	events(t, r, `"name":"direct","type":"EVENT_TYPE_RENAME"`, `"name":"moved","type":"EVENT_TYPE_CREATE"`)
	if code, b := fsCall(t, base, c, "Remove", `{"path":"w/moved"}`); code != http.StatusOK {
		t.Fatalf("Remove: %d %s", code, b)
	}
	events(t, r, `"name":"moved","type":"EVENT_TYPE_REMOVE"`)
	if err := os.Chmod(filepath.Join(ws, "w/sub/new.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	events(t, r, `"name":"sub/new.txt","type":"EVENT_TYPE_CHMOD"`)
	events(t, r, `{"keepalive":{}}`)

	// Not recursive: what happens beneath is not seen.
	r2, stop2 := watch(t, base, c, `{"path":"w"}`)
	defer stop2()
	next(t, r2)
	os.WriteFile(filepath.Join(ws, "w/sub/quiet"), nil, 0o644)
	os.WriteFile(filepath.Join(ws, "w/loud"), nil, 0o644)
	events(t, r2, `"name":"loud"`)

	// Through a symlink, out of the workspace, or at a file: refused.
	if err := os.Symlink(t.TempDir(), filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"link", "link/x", "../..", "/etc", "w/loud"} {
		r, stop := watch(t, base, c, `{"path":"`+p+`"}`)
		flags, msg := next(t, r)
		stop()
		if flags&2 == 0 || !strings.Contains(msg, `"invalid_argument"`) {
			t.Errorf("WatchDir %s: %d %s", p, flags, msg)
		}
	}

	// The watch ends when the sandbox does.
	code, _, b = do(t, base, call{"DELETE", "/sandboxes/" + c.SandboxID, map[string]string{"X-API-Key": key}, ""})
	if code != http.StatusNoContent {
		t.Fatalf("kill: %d %s", code, b)
	}
	for {
		if flags, msg := next(t, r2); flags&2 != 0 {
			if !strings.Contains(msg, `"unavailable"`) && msg != `{}` {
				t.Fatalf("the watch's end once the sandbox was killed: %s", msg)
			}
			break
		}
	}
}

func TestWatchDirBound(t *testing.T) {
	base, _ := serveManager(t)
	c := create(t, base, `{"templateID":"base"}`)
	var stops []func()
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	for i := 0; i < sandboxes.MaxWatchers; i++ {
		r, stop := watch(t, base, c, `{"path":"/home/user"}`)
		stops = append(stops, stop)
		if _, msg := next(t, r); msg != `{"start":{}}` {
			t.Fatalf("watch %d: %s", i, msg)
		}
	}
	r, stop := watch(t, base, c, `{"path":"/home/user"}`)
	defer stop()
	if flags, msg := next(t, r); flags&2 == 0 || !strings.Contains(msg, `"resource_exhausted"`) {
		t.Fatalf("one watch more than the bound: %s", msg)
	}
}

// sign is the SDK's getSignature (signature.ts).
func sign(path, op, user, token string, exp int64) (string, string) {
	raw := path + ":" + op + ":" + user + ":" + token
	e := ""
	if exp != 0 {
		e = strconv.FormatInt(exp, 10)
		raw += ":" + e
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "="), e
}

func TestSignedFileURLs(t *testing.T) {
	base := serve(t)
	c := create(t, base, `{"templateID":"base","secure":true}`)
	other := create(t, base, `{"templateID":"base"}`)
	noToken := map[string]string{"E2b-Sandbox-Id": c.SandboxID, "E2b-Sandbox-Port": "49983"}
	signed := func(path, op, user, token string, exp int64) string {
		sig, e := sign(path, op, user, token, exp)
		q := url.Values{"path": {path}, "signature": {sig}}
		if user != "" {
			q.Set("username", user)
		}
		if e != "" {
			q.Set("signature_expiration", e)
		}
		return "/files?" + q.Encode()
	}
	later := time.Now().Add(time.Minute).Unix()
	code, _, b := do(t, base, call{"POST", signed("/home/user/up.txt", "write", "", c.EnvdAccessToken, later), with(noToken, "Content-Type", "application/octet-stream"), "uploaded"})
	if code != http.StatusOK {
		t.Fatalf("an upload with a signature: %d %s", code, b)
	}
	code, _, b = do(t, base, call{"GET", signed("/home/user/up.txt", "read", "user", c.EnvdAccessToken, 0), noToken, ""})
	if code != http.StatusOK || string(b) != "uploaded" {
		t.Fatalf("a download with a signature: %d %s", code, b)
	}
	sig, _ := sign("/home/user/up.txt", "read", "", c.EnvdAccessToken, 0)
	for name, p := range map[string]string{
		"expired":           signed("/home/user/up.txt", "read", "", c.EnvdAccessToken, time.Now().Add(-time.Second).Unix()),
		"another sandbox's": signed("/home/user/up.txt", "read", "", other.EnvdAccessToken, 0),
		"a write's":         signed("/home/user/up.txt", "write", "", c.EnvdAccessToken, 0),
		"another path's":    "/files?path=/home/user/other&signature=" + url.QueryEscape(sig),
		"another user's":    "/files?path=/home/user/up.txt&username=root&signature=" + url.QueryEscape(sig),
		"tampered":          "/files?path=/home/user/up.txt&signature=" + url.QueryEscape(sig[:len(sig)-2]+"AA"),
		"extended":          "/files?path=/home/user/up.txt&signature=" + url.QueryEscape(sig) + fmt.Sprintf("&signature_expiration=%d", later),
		"unversioned":       "/files?path=/home/user/up.txt&signature=" + url.QueryEscape(sig[3:]),
	} {
		code, _, b := do(t, base, call{"GET", p, noToken, ""})
		if code != http.StatusUnauthorized {
			t.Errorf("a download with %s signature: %d %s", name, code, b)
		}
	}
	// A signature is for /files only.
	code, _, b = do(t, base, call{"POST", "/filesystem.Filesystem/Stat?signature=" + url.QueryEscape(sig), with(noToken, "Content-Type", "application/json"), `{"path":"up.txt"}`})
	if code != http.StatusUnauthorized {
		t.Fatalf("Stat with a signature: %d %s", code, b)
	}
}
