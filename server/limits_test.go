package server

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
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

// serveTCP serves the real manager on the fake backend on a TCP listener
// with the token, with o changed by mod; it returns the server's address.
func serveTCP(t *testing.T, mod func(*Options)) (*Server, *managertest.Manager, string) {
	t.Helper()
	fake := managertest.New(t, sandboxes.Options{})
	o := Options{Manager: fake, Token: testToken}
	if mod != nil {
		mod(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Shutdown(context.Background())
		<-done
	})
	return s, fake, l.Addr().String()
}

// rawRequest opens a connection and sends head (the request line and
// headers, without the blank line) and then body, and nothing more.
func rawRequest(t *testing.T, addr, head, body string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, head+"\r\nHost: sandbox\r\nAuthorization: Bearer "+testToken+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	return c
}

// answer reads the HTTP answer on c within limit.
func answer(t *testing.T, c net.Conn, limit time.Duration) (*http.Response, string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(limit))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer within %s: %v", limit, err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestStalledBodies: 16 requests whose bodies stall hold every slot of
// the one TCP client (the token), so a 17th request is refused; after the
// body timeout each stalled one is answered 408 and its connection
// closed, and the client's requests go through again. A file put that
// stalls midway is cut off the same way and leaves no file.
func TestStalledBodies(t *testing.T) {
	// Long enough for a loaded host to take all 16 slots well before the
	// first stalled body is cut off (2 s was not, with the other core busy).
	const timeout = 10 * time.Second
	_, _, addr := serveTCP(t, func(o *Options) { o.BodyTimeout = timeout })
	e := &env{t: t, url: "http://" + addr, c: &http.Client{}}
	sb := e.create(sandboxes.Spec{})

	var stalled []net.Conn
	for i := range DefaultMaxConcurrentPerClient {
		head := "POST /v1/sandboxes HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 100"
		if i%2 == 1 {
			head = "PUT /v1/sandboxes/" + sb.ID + "/files/stalled.bin HTTP/1.1\r\nContent-Length: 1000"
		}
		stalled = append(stalled, rawRequest(t, addr, head, `{"labels"`))
	}
	deadline := time.Now().Add(timeout * 3 / 4)
	for {
		resp := e.req("GET", "/v1/sandboxes", nil)
		if resp.StatusCode == http.StatusTooManyRequests {
			break // every slot is held by a stalled body
		}
		if time.Now().After(deadline) {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("the stalled bodies did not take the client's slots: %d %s", resp.StatusCode, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	for _, c := range stalled {
		resp, body := answer(t, c, timeout+5*time.Second)
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(body, `"timeout"`) || !strings.Contains(body, "nothing arrived") || !resp.Close {
			t.Errorf("a stalled body: %d %q (close %v), want 408 timeout and the connection closed", resp.StatusCode, body, resp.Close)
		}
	}
	if waited := time.Since(start); waited > 2*timeout {
		t.Errorf("the stalled bodies were cut off after %s, want about %s", waited, timeout)
	}
	want[SandboxList](t, e.req("GET", "/v1/sandboxes", nil), 200)
	wantErr(t, e.req("GET", "/v1/sandboxes/"+sb.ID+"/stat/stalled.bin", nil), 404, sandboxes.CodeNotFound)
	// A body that keeps coming, slower than the timeout as a whole but
	// never pausing that long, is taken (on a server with a short timeout,
	// to keep the test short).
	const short = 2 * time.Second
	_, _, addr2 := serveTCP(t, func(o *Options) { o.BodyTimeout = short })
	e2 := &env{t: t, url: "http://" + addr2, c: &http.Client{}}
	sb2 := e2.create(sandboxes.Spec{})
	pr, pw := io.Pipe()
	go func() {
		for range 5 {
			pw.Write([]byte("0123456789"))
			time.Sleep(short * 2 / 5)
		}
		pw.Close()
	}()
	fi := want[sandboxes.FileInfo](t, e2.req("PUT", "/v1/sandboxes/"+sb2.ID+"/files/slow.txt", pr), 200)
	if fi.Size != 50 {
		t.Errorf("a slow put: %+v", fi)
	}
}

// TestUnreadBodyAndSilentConnection: a body a route does not read, and a
// connection that sends no request at all, hold the connection no longer
// than the body and header timeouts.
func TestUnreadBodyAndSilentConnection(t *testing.T) {
	const timeout = 300 * time.Millisecond
	_, _, addr := serveTCP(t, func(o *Options) { o.BodyTimeout, o.HeaderTimeout = timeout, timeout })
	c := rawRequest(t, addr, "GET /v1/sandboxes HTTP/1.1\r\nContent-Length: 100", "")
	if resp, _ := answer(t, c, 2*time.Second); resp.StatusCode != 200 {
		t.Fatalf("GET with an unread body: %d", resp.StatusCode)
	}
	closedWithin(t, c, 3*time.Second)

	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	closedWithin(t, silent, 3*time.Second)
	// A client without the token is answered and its connection closed.
	noToken, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer noToken.Close()
	io.WriteString(noToken, "GET /v1/sandboxes HTTP/1.1\r\nHost: sandbox\r\n\r\n")
	if resp, _ := answer(t, noToken, 2*time.Second); resp.StatusCode != 401 || !resp.Close {
		t.Errorf("without the token: %d, close %v; want 401 and the connection closed", resp.StatusCode, resp.Close)
	}
}

// closedWithin checks that the server closes c within limit.
func closedWithin(t *testing.T, c net.Conn, limit time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(limit))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Errorf("the server kept the connection open for %s: %v", limit, err)
	}
}

// TestConnectionCap: connections over MaxConnections are answered 429 and
// closed at once, so a flood of them costs no descriptors beyond the cap;
// the slots come back as connections close.
func TestConnectionCap(t *testing.T) {
	const max = 8
	_, _, addr := serveTCP(t, func(o *Options) { o.MaxConnections = max })
	before := openFDs(t)
	var held []net.Conn
	for range max {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// Each held connection costs the test one descriptor and the server
	// one; every connection beyond is refused and closed by the server.
	for i := range 3 * max {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		resp, body := answer(t, c, 2*time.Second)
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "limit_exceeded") || !strings.Contains(body, "--max-connections") {
			t.Fatalf("connection %d over the cap: %d %s", i, resp.StatusCode, body)
		}
		closedWithin(t, c, time.Second)
		c.Close()
	}
	if n := openFDs(t) - before; n > 2*max+2 {
		t.Errorf("%d descriptors more with %d connections held and %d refused, want at most %d", n, max, 3*max, 2*max+2)
	}
	for _, c := range held {
		defer c.Close() // before the server's Shutdown, which waits for them
	}
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := rawRequest(t, addr, "GET /v1/health HTTP/1.1", "")
		if resp, _ := answer(t, c, 2*time.Second); resp.StatusCode == 200 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("a slot did not come back after a connection closed: %d", resp.StatusCode)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}
