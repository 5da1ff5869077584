package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/serverproc"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// limitsClient talks to a real serve over TCP with its token.
type limitsClient struct {
	t    *testing.T
	base string
	c    *http.Client
}

func (lc *limitsClient) do(method, path string, body io.Reader) (int, []byte, http.Header) {
	lc.t.Helper()
	req, err := http.NewRequest(method, lc.base+path, body)
	if err != nil {
		lc.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+serveTestToken)
	resp, err := lc.c.Do(req)
	if err != nil {
		lc.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Trailer
}

// TestServeHoldsUnderAbuse: the limits of issue 23, through the real `serve` and
// its real sandboxes: an oversized sandbox refused at create with the
// ceiling and the host's figure; a long path a 400 on every path route; a
// file read with its SHA-256 as a trailer; a put over the disk quota that
// leaves no partial file; a stalled body cut off while other requests
// go on; connections over --max-connections refused without holding
// descriptors; and a sandbox's snapshots bounded, then collected when it
// is killed.
func TestServeHoldsUnderAbuse(t *testing.T) {
	testtier.Root(t)
	srv := serverproc.Serve(t, serveTestToken, "--max-connections", "8", "--body-timeout", "1s", "--max-snapshots", "2")
	lc := &limitsClient{t: t, base: "http://" + srv.Addr, c: &http.Client{}}

	// A sandbox the host cannot honour.
	code, body, _ := lc.do("POST", "/v1/sandboxes", strings.NewReader(`{"resources": {"disk": "8TiB", "memory": "64GiB", "vcpu": 16}}`))
	if code != http.StatusForbidden || !strings.Contains(string(body), "host_ceilings.disk") || !strings.Contains(string(body), "is above this host's ceiling") {
		t.Errorf("an 8 TiB, 64 GiB, 16-vCPU sandbox: %d %s", code, body)
	}
	code, body, _ = lc.do("POST", "/v1/sandboxes", strings.NewReader(`{"resources": {"disk": "16MiB"}}`))
	var info struct{ ID string }
	if json.Unmarshal(body, &info); code != http.StatusCreated || info.ID == "" {
		t.Fatalf("create: %d %s", code, body)
	}
	base := "/v1/sandboxes/" + info.ID

	// A 5,000-byte path on every route that takes one.
	long := strings.Repeat("a/", 2500)[:5000]
	for _, route := range []string{"PUT /files/", "GET /files/", "DELETE /files/", "GET /stat/", "GET /ls/"} {
		method, prefix, _ := strings.Cut(route, " ")
		code, body, _ := lc.do(method, base+prefix+long, strings.NewReader("x"))
		if code != http.StatusBadRequest || !strings.Contains(string(body), "bytes long: the most is 4084 bytes") {
			t.Errorf("%s of a 5,000-byte path: %d %.200s", route, code, body)
		}
	}

	// A read's trailer is the SHA-256 of its bytes.
	old := bytes.Repeat([]byte("old!"), 1<<20)
	if code, body, _ := lc.do("PUT", base+"/files/keep.bin", bytes.NewReader(old)); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	code, body, trailer := lc.do("GET", base+"/files/keep.bin", nil)
	sum := sha256.Sum256(old)
	if code != 200 || !bytes.Equal(body, old) || trailer.Get("X-Agentsandbox-Sha256") != hex.EncodeToString(sum[:]) {
		t.Errorf("get: %d, %d bytes, trailer %q, want %x", code, len(body), trailer.Get("X-Agentsandbox-Sha256"), sum)
	}

	// Over the 16 MiB disk: refused, nothing partial, the old file whole.
	big := bytes.Repeat([]byte("big!"), 5<<20)
	for _, p := range []string{"keep.bin", "new.bin"} {
		if code, body, _ := lc.do("PUT", base+"/files/"+p, bytes.NewReader(big)); code != http.StatusRequestEntityTooLarge {
			t.Errorf("put of 20 MiB to %s on a 16 MiB disk: %d %s", p, code, body)
		}
	}
	if code, body, _ := lc.do("GET", base+"/files/keep.bin", nil); code != 200 || !bytes.Equal(body, old) {
		t.Errorf("keep.bin after a refused put: %d, %d bytes", code, len(body))
	}
	if code, _, _ := lc.do("GET", base+"/stat/new.bin", nil); code != http.StatusNotFound {
		t.Errorf("new.bin after a refused put: %d, want 404", code)
	}

	// A stalled body is answered 408 after --body-timeout; meanwhile and
	// after, the client's other requests go through.
	stalled, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	fmt.Fprintf(stalled, "PUT %s/files/stalled.bin HTTP/1.1\r\nHost: sandbox\r\nAuthorization: Bearer %s\r\nContent-Length: 1000\r\n\r\npart", base, serveTestToken)
	if code, _, _ := lc.do("GET", base, nil); code != 200 {
		t.Errorf("a request beside a stalled body: %d", code)
	}
	stalled.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(stalled), nil)
	if err != nil || resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("a stalled body: %v %v, want 408", resp, err)
	}
	if code, _, _ := lc.do("GET", base+"/stat/stalled.bin", nil); code != http.StatusNotFound {
		t.Errorf("a cut-off put left its file: %d", code)
	}

	// Connections over --max-connections: refused at once.
	lc.c.CloseIdleConnections()
	time.Sleep(100 * time.Millisecond)
	fds := func() int {
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", srv.Procs[0].Pid()))
		return len(ents)
	}
	before := fds()
	var held []net.Conn
	for range 8 {
		c, err := net.Dial("tcp", srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	for range 50 {
		c, err := net.Dial("tcp", srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("a connection over --max-connections 8: %v %v, want 429", resp, err)
		}
		c.Close()
	}
	if n := fds() - before; n > 8+2 {
		t.Errorf("serve holds %d descriptors more with 8 connections held and 50 refused", n)
	}
	for _, c := range held {
		c.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequest("GET", lc.base+"/v1/health", nil)
		req.Header.Set("Authorization", "Bearer "+serveTestToken)
		if resp, err := lc.c.Do(req); err == nil && resp.StatusCode == 200 {
			resp.Body.Close()
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the slots did not come back: %v %v", resp, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Snapshots: at most --max-snapshots 2, then collected at the kill.
	var snaps []string
	for i := range 3 {
		if code, body, _ := lc.do("PUT", base+"/files/n.txt", strings.NewReader(fmt.Sprint(i))); code != 200 {
			t.Fatalf("put: %d %s", code, body)
		}
		code, body, _ := lc.do("POST", base+"/snapshots", nil)
		if i == 2 {
			if code != http.StatusTooManyRequests || !strings.Contains(string(body), "--max-snapshots") {
				t.Errorf("a third snapshot under --max-snapshots 2: %d %s", code, body)
			}
			break
		}
		var s struct{ ID string }
		if json.Unmarshal(body, &s); code != http.StatusCreated {
			t.Fatalf("snapshot: %d %s", code, body)
		}
		snaps = append(snaps, s.ID)
	}
	if code, body, _ := lc.do("DELETE", base, nil); code != 200 {
		t.Fatalf("kill: %d %s", code, body)
	}
	// The collector takes them a moment after the kill.
	deadline = time.Now().Add(30 * time.Second)
	for _, s := range snaps {
		hexd := strings.TrimPrefix(s, "sha256:")
		for {
			if _, err := os.Stat(fmt.Sprintf("%s/blobs/%s/%s", srv.State, hexd[:2], hexd)); err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the tree of snapshot %s is still stored 30s after its sandbox was killed", s)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if code, body, _ := lc.do("POST", "/v1/sandboxes", strings.NewReader(`{"fromSnapshot": "`+snaps[0]+`"}`)); code != http.StatusNotFound {
		t.Errorf("a fork from a killed sandbox's snapshot: %d %.300s", code, body)
	}
	srv.Stop(t)
}
