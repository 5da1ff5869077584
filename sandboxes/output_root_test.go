package sandboxes_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server/mcp"
)

// patternShell writes the first n bytes of benchLine repeated.
func patternShell(n int64) string {
	return fmt.Sprintf("yes %q | head -c %d", strings.TrimSuffix(benchLine, "\n"), n)
}

// patternAt is the byte at offset off of benchLine repeated.
func patternAt(off int64) byte { return benchLine[off%int64(len(benchLine))] }

// checked reads an exec's stream as a client would and fails the test
// unless every stdout byte it gets is the pattern's at its offset and
// each event (or gap) starts where the last ended. It returns what came:
// the bytes counted, the gaps, the exit.
type checked struct {
	bytes int64
	gaps  [][2]int64
	next  int64
	exit  *sandboxes.ExitStatus
	sum   string
}

func readChecked(t *testing.T, body io.Reader, from int64, pause func(n int)) checked {
	t.Helper()
	c := checked{next: from}
	h := sha256.New()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	n := 0
	for sc.Scan() {
		var ev sandboxes.ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("event %.200q: %v", sc.Bytes(), err)
		}
		switch ev.Type {
		case sandboxes.EventStdout:
			data := []byte(ev.Text)
			if ev.Base64 != nil {
				data = ev.Base64
			}
			if ev.Offset != c.next {
				t.Fatalf("stdout event at %d, want %d (where the last ended): bytes skipped without a gap event", ev.Offset, c.next)
			}
			for i, b := range data {
				if b != patternAt(ev.Offset+int64(i)) {
					t.Fatalf("stdout byte %d is %q, want %q", ev.Offset+int64(i), b, patternAt(ev.Offset+int64(i)))
				}
			}
			h.Write(data)
			c.bytes += int64(len(data))
			c.next = ev.Offset + int64(len(data))
		case sandboxes.EventGap:
			if ev.Stream != sandboxes.EventStdout || ev.Offset != c.next || ev.Next <= ev.Offset {
				t.Fatalf("gap %+v, want one of stdout from %d", ev, c.next)
			}
			c.gaps = append(c.gaps, [2]int64{ev.Offset, ev.Next})
			c.next = ev.Next
		case sandboxes.EventExit:
			c.exit = ev.Exit
		case sandboxes.EventError:
			t.Fatalf("error event: %s", ev.Error)
		}
		n++
		if pause != nil {
			pause(n)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	c.sum = hex.EncodeToString(h.Sum(nil))
	return c
}

func (a *api) stream(t *testing.T, method, path string, body any) io.ReadCloser {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://sandbox"+path, rd)
	resp, err := a.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	return resp.Body
}

// killAndActions kills sandbox id and returns the exec entries of its
// record, in order.
func (a *api) killAndActions(t *testing.T, id string) []*record.Action {
	t.Helper()
	var info sandboxes.Info
	if err := a.do("DELETE", "/v1/sandboxes/"+id, nil, &info); err != nil {
		t.Fatal(err)
	}
	rid, err := a.store.Resolve(info.Record)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := a.store.Get(rid)
	if err != nil {
		t.Fatal(err)
	}
	var out []*record.Action
	for _, e := range rec.Sandbox.Entries {
		act, err := a.store.Action(e.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if act.Kind == "exec" {
			out = append(out, act)
		}
	}
	return out
}

// TestExecOutput256MiB: a foreground exec that writes 256 MiB as fast as
// it can, through the real server over the real manager: the client gets
// every byte once and in order (count, sha256, each byte at its offset),
// and the record's stdout blob is the same bytes. Then 16 MiB of random
// bytes (sent as base64) hash to what sha256sum says in the sandbox.
// Slow: about 10 s.
func TestExecOutput256MiB(t *testing.T) {
	const size = 256 << 20
	a := newAPI(t, 2)
	var info sandboxes.Info
	if err := a.do("POST", "/v1/sandboxes", sandboxes.Spec{Resources: map[string]any{"timeout": "10m"}}, &info); err != nil {
		t.Fatal(err)
	}
	body := a.stream(t, "POST", "/v1/sandboxes/"+info.ID+"/exec", sandboxes.ExecRequest{Shell: patternShell(size)})
	c := readChecked(t, body, 0, nil)
	body.Close()
	want := patternSum(benchLine, size)
	if c.bytes != size || c.sum != want || len(c.gaps) != 0 || c.exit == nil || c.exit.ExitCode != 0 {
		t.Fatalf("256 MiB: got %d bytes (sha256 %s, want %s), gaps %v, exit %+v", c.bytes, c.sum, want, c.gaps, c.exit)
	}

	// Bytes that are not UTF-8 come as base64, every one of them.
	raw := a.stream(t, "POST", "/v1/sandboxes/"+info.ID+"/exec", sandboxes.ExecRequest{Shell: "head -c 16777216 /dev/urandom | tee r.bin"})
	h := sha256.New()
	var n int64
	sc := bufio.NewScanner(raw)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		var ev sandboxes.ExecEvent
		json.Unmarshal(sc.Bytes(), &ev)
		if ev.Type == sandboxes.EventStdout {
			if ev.Offset != n {
				t.Fatalf("random bytes: an event at %d, want %d", ev.Offset, n)
			}
			b := append([]byte(ev.Text), ev.Base64...)
			h.Write(b)
			n += int64(len(b))
		}
	}
	raw.Close()
	out, code, err := a.exec(info.ID, sandboxes.ExecRequest{Shell: "sha256sum r.bin"})
	if err != nil || code != 0 {
		t.Fatal(code, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != 16<<20 || !strings.HasPrefix(out, got+" ") {
		t.Errorf("16 MiB of random bytes: got %d bytes hashing to %s; in the sandbox: %s", n, got, out)
	}

	acts := a.killAndActions(t, info.ID)
	if len(acts) < 1 || acts[0].Stdout == nil || acts[0].Stdout.String() != "sha256:"+want || acts[0].StdoutTruncated != 0 {
		t.Errorf("the record's first exec: %+v, want its stdout blob sha256:%s whole", acts[0], want)
	}
}

// TestExecOutputSlowReaders, with a server that keeps 1 MiB of each
// stream on disk: a foreground reader slower than its command gets every
// byte (the command waits for it: it takes as long as the reader); a
// reader of a background exec that falls behind gets the bytes kept and a
// gap event for the rest, never other bytes in their place; reading the
// ended exec again gives the same, and the record names the bytes left
// out.
func TestExecOutputSlowReaders(t *testing.T) {
	const size, limit = 24 << 20, 1 << 20
	a := newAPIWith(t, sandboxes.Options{MaxSandboxes: 2, LogLimit: limit})
	var info sandboxes.Info
	if err := a.do("POST", "/v1/sandboxes", sandboxes.Spec{Resources: map[string]any{"timeout": "10m"}}, &info); err != nil {
		t.Fatal(err)
	}
	id := info.ID

	start := time.Now()
	body := a.stream(t, "POST", "/v1/sandboxes/"+id+"/exec", sandboxes.ExecRequest{Shell: patternShell(size)})
	c := readChecked(t, body, 0, func(int) { time.Sleep(2 * time.Millisecond) })
	body.Close()
	read := time.Since(start)
	if c.bytes != size || c.sum != patternSum(benchLine, size) || len(c.gaps) != 0 || c.exit == nil {
		t.Fatalf("slow foreground reader: %d of %d bytes, gaps %v, exit %+v", c.bytes, size, c.gaps, c.exit)
	}
	// The command could not end before the reader had all but the last
	// few MiB (window, batch, what is in flight): about 300 events of 2ms.
	if d := time.Duration(c.exit.DurationMS) * time.Millisecond; d < 500*time.Millisecond {
		t.Errorf("the command ended after %v, its reader after %v: it did not wait for its reader", d, read)
	}

	var bg sandboxes.ExecInfo
	if err := a.do("POST", "/v1/sandboxes/"+id+"/exec", sandboxes.ExecRequest{Shell: patternShell(size), Background: true}, &bg); err != nil {
		t.Fatal(err)
	}
	follow := a.stream(t, "GET", "/v1/sandboxes/"+id+"/execs/"+bg.ID+"/output?stdout=0&stderr=0&follow=1", nil)
	waited := false
	c = readChecked(t, follow, 0, func(int) {
		if waited {
			return
		}
		waited = true // fall behind: the command runs to its end meanwhile
		for {
			var x sandboxes.ExecInfo
			if err := a.do("GET", "/v1/sandboxes/"+id+"/execs/"+bg.ID, nil, &x); err != nil {
				t.Fatal(err)
			}
			if !x.Running {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	follow.Close()
	want := [][2]int64{{limit, size}}
	if c.bytes != limit || fmt.Sprint(c.gaps) != fmt.Sprint(want) || c.exit == nil {
		t.Errorf("slow follower of a background exec: %d bytes, gaps %v, exit %+v; want the %d kept and a gap %v", c.bytes, c.gaps, c.exit, limit, want)
	}

	// Again from an offset, without follow: the kept bytes from there, the
	// same gap, the exit.
	again := a.stream(t, "GET", fmt.Sprintf("/v1/sandboxes/%s/execs/%s/output?stdout=%d", id, bg.ID, 1000), nil)
	c = readChecked(t, again, 1000, nil)
	again.Close()
	if c.bytes != limit-1000 || fmt.Sprint(c.gaps) != fmt.Sprint(want) || c.exit == nil {
		t.Errorf("read again from 1000: %d bytes, gaps %v, exit %+v", c.bytes, c.gaps, c.exit)
	}

	acts := a.killAndActions(t, id)
	if len(acts) != 2 || acts[1].StdoutTruncated != size-limit || acts[0].StdoutTruncated != size-limit {
		t.Fatalf("record: %d execs, truncated %+v", len(acts), acts)
	}
	if acts[1].Stdout.String() != "sha256:"+patternSum(benchLine, limit) {
		t.Errorf("the record's stdout blob is not the first %d bytes", limit)
	}
}

// TestMCPExecOutput256MiB: the MCP tools over the real manager: exec of a
// command that writes 256 MiB shows its first part, and exec_output from
// the offsets it gives reads every other byte, in order, to the end.
// Slow: about 20 s.
func TestMCPExecOutput256MiB(t *testing.T) {
	const size = 256 << 20
	a := newAPI(t, 2)
	ctx := context.Background()
	srv := mcp.New(a.m, "test", mcp.Options{MaxOutputBytes: 1 << 20})
	st, ct := sdk.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cs.Close(); ss.Wait() }()
	call := func(name string, args, out any) {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", name, err, res)
		}
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
	}
	var sb mcp.Sandbox
	call("sandbox_create", map[string]any{"resources": map[string]any{"timeout": "10m"}}, &sb)
	var x mcp.ExecResult
	call("exec", map[string]any{"sandbox_id": sb.ID, "shell": patternShell(size)}, &x)
	if x.ExitCode != 0 || !x.Truncated || x.StdoutBytes != size || x.StdoutNext != 1<<20 {
		t.Fatalf("exec: exit %d, truncated %v, %d bytes, next %d", x.ExitCode, x.Truncated, x.StdoutBytes, x.StdoutNext)
	}
	h := sha256.New()
	h.Write([]byte(x.Stdout))
	next, calls := x.StdoutNext, 0
	for {
		var o mcp.ExecOutputResult
		call("exec_output", map[string]any{"sandbox_id": sb.ID, "exec_id": x.ExecID, "stdout_offset": next}, &o)
		calls++
		if o.StdoutFrom != next || o.StdoutLost != 0 || o.StdoutNext != next+int64(len(o.Stdout)) {
			t.Fatalf("exec_output from %d: from %d, %d bytes, next %d, lost %d", next, o.StdoutFrom, len(o.Stdout), o.StdoutNext, o.StdoutLost)
		}
		h.Write([]byte(o.Stdout))
		next = o.StdoutNext
		if !o.More {
			break
		}
		if calls > size>>20+2 {
			t.Fatalf("exec_output still has more after %d calls", calls)
		}
	}
	if got, want := hex.EncodeToString(h.Sum(nil)), patternSum(benchLine, size); next != size || got != want {
		t.Errorf("exec and %d exec_output calls: %d bytes hashing to %s, want %d hashing to %s", calls, next, got, size, want)
	}
}
