package sandboxes_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/namespace"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// api is a client of a real server (the REST handler over the real
// manager) on a unix socket.
type api struct {
	c     *http.Client
	store *record.Store
	dir   string
	m     sandboxes.Manager
}

func newAPI(tb testing.TB, maxSandboxes int) *api {
	tb.Helper()
	return newAPIWith(tb, sandboxes.Options{MaxSandboxes: maxSandboxes})
}

// newAPIWith is newAPI with the manager's options o (its engine options
// are the test's).
func newAPIWith(tb testing.TB, o sandboxes.Options) *api {
	tb.Helper()
	testtier.Root(tb)
	dir := tb.TempDir()
	store, err := record.OpenStore(filepath.Join(dir, "state"))
	if err != nil {
		tb.Fatal(err)
	}
	pol, err := policy.Load(context.Background(), policy.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	hostState := filepath.Join(dir, "host-state")
	o.Engine = engine.Options{
		Jobs: 1, Host: engine.Host{Root: true}, Store: store,
		RunRoot: filepath.Join(store.Dir(), "runs"), HostStateDir: hostState,
		Backends: map[workflow.Isolation]vmrunner.Backend{
			workflow.IsolationNamespace: namespace.New(namespace.Options{StateDir: hostState, JailDir: filepath.Join(dir, "jails")}),
		},
		Policy: pol, ToolVersion: "test",
	}
	m, err := sandboxes.New(o)
	if err != nil {
		tb.Fatal(err)
	}
	srv, err := server.New(server.Options{Manager: m, MaxConcurrentPerClient: 256, Logf: tb.Logf})
	if err != nil {
		tb.Fatal(err)
	}
	sock := filepath.Join(dir, "serve.sock")
	l, err := server.ListenUnix(sock)
	if err != nil {
		tb.Fatal(err)
	}
	go srv.Serve(l)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			tb.Error(err)
		}
	})
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
		MaxIdleConnsPerHost: 64,
	}
	return &api{c: &http.Client{Transport: tr}, store: store, dir: dir, m: m}
}

func (a *api) do(method, path string, body any, out any) error {
	var rd io.Reader
	if b, ok := body.([]byte); ok {
		rd = bytes.NewReader(b)
	} else if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://sandbox"+path, rd)
	resp, err := a.c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// exec runs a command and returns its stdout and exit code.
func (a *api) exec(id string, r sandboxes.ExecRequest) (string, int, error) {
	b, _ := json.Marshal(r)
	resp, err := a.c.Post("http://sandbox/v1/sandboxes/"+id+"/exec", "application/json", bytes.NewReader(b))
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		return "", 0, fmt.Errorf("exec: %d %s", resp.StatusCode, raw)
	}
	var out strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev sandboxes.ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return "", 0, err
		}
		switch ev.Type {
		case sandboxes.EventStdout:
			out.WriteString(ev.Text)
		case sandboxes.EventExit:
			return out.String(), ev.Exit.ExitCode, nil
		case sandboxes.EventError:
			return "", 0, fmt.Errorf("exec: %s", ev.Error)
		}
	}
	return "", 0, fmt.Errorf("exec: the stream ended without an exit: %v", sc.Err())
}

type latencies []time.Duration

func (l latencies) pct(p float64) time.Duration {
	s := append(latencies(nil), l...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	return s[int(float64(len(s)-1)*p)]
}

// TestLoad: 50 sandboxes created at once and 1,000 commands spread over
// them through the real server, with no failure, then every sandbox
// killed, and nothing left on the host. Bounded in count, not time; it
// logs p50 and p99 of create, exec and file round trips (figures in
// docs/benchmarks.md come from BenchmarkServe*, not from here).
func TestLoad(t *testing.T) {
	const boxes, execs, parallel = 50, 1000, 8
	a := newAPI(t, boxes)
	before, _ := netns.List(netns.Prefix)
	ids := make([]string, boxes)
	var mu sync.Mutex
	var creates, runs, files latencies
	var wg sync.WaitGroup
	errs := make(chan error, boxes+execs)
	for i := range boxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			var info sandboxes.Info
			if err := a.do("POST", "/v1/sandboxes", sandboxes.Spec{Labels: map[string]string{"load": "1"}, Resources: map[string]any{"memory": "128MiB", "disk": "64MiB"}}, &info); err != nil {
				errs <- err
				return
			}
			mu.Lock()
			ids[i] = info.ID
			creates = append(creates, time.Since(start))
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	work := make(chan int)
	errs = make(chan error, execs)
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				id := ids[n%boxes]
				start := time.Now()
				out, code, err := a.exec(id, sandboxes.ExecRequest{Argv: []string{"echo", fmt.Sprint(n)}})
				d := time.Since(start)
				if err == nil && (code != 0 || out != fmt.Sprintf("%d\n", n)) {
					err = fmt.Errorf("exec %d in %s: exit %d, out %q", n, id, code, out)
				}
				if err != nil {
					errs <- err
					continue
				}
				fstart := time.Now()
				path := fmt.Sprintf("/v1/sandboxes/%s/files/f%d.txt", id, n)
				if err := a.do("PUT", path, []byte("x"), nil); err != nil {
					errs <- err
					continue
				}
				fd := time.Since(fstart)
				mu.Lock()
				runs, files = append(runs, d), append(files, fd)
				mu.Unlock()
			}
		}()
	}
	for n := range execs {
		work <- n
	}
	close(work)
	wg.Wait()
	close(errs)
	failures := 0
	for err := range errs {
		failures++
		if failures <= 5 {
			t.Error(err)
		}
	}
	if failures > 0 {
		t.Errorf("%d of %d execs failed", failures, execs)
	}
	t.Logf("create (50 at once): p50 %v p99 %v; exec (8 at a time): p50 %v p99 %v; file put: p50 %v p99 %v",
		creates.pct(.5), creates.pct(.99), runs.pct(.5), runs.pct(.99), files.pct(.5), files.pct(.99))

	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var info sandboxes.Info
			if err := a.do("DELETE", "/v1/sandboxes/"+id, nil, &info); err != nil || info.Record == "" {
				t.Errorf("kill %s: %v %+v", id, err, info)
			}
		}()
	}
	wg.Wait()
	after, _ := netns.List(netns.Prefix)
	for _, n := range after {
		for _, id := range ids {
			if strings.Contains(n, id[:8]) && !contains(before, n) {
				t.Errorf("namespace left: %s", n)
			}
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(a.store.Dir(), "runs")); len(entries) != 0 {
		t.Errorf("sandbox directories left: %d", len(entries))
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// BenchmarkServeExec: one command (`true`) per iteration through the real
// server into a warm namespace sandbox, beside the same command as a
// whole one-step run through the engine (what `apply` does, without the
// process start), in the same run.
func BenchmarkServeExec(b *testing.B) {
	a := newAPI(b, 4)
	var info sandboxes.Info
	if err := a.do("POST", "/v1/sandboxes", sandboxes.Spec{}, &info); err != nil {
		b.Fatal(err)
	}
	b.Run("warm-sandbox", func(b *testing.B) {
		var l latencies
		for b.Loop() {
			start := time.Now()
			if _, code, err := a.exec(info.ID, sandboxes.ExecRequest{Argv: []string{"true"}}); err != nil || code != 0 {
				b.Fatalf("exec: %d %v", code, err)
			}
			l = append(l, time.Since(start))
		}
		b.ReportMetric(float64(l.pct(.5).Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(l.pct(.99).Microseconds())/1000, "p99-ms")
	})
	b.Run("create-and-kill", func(b *testing.B) {
		for b.Loop() {
			var i sandboxes.Info
			if err := a.do("POST", "/v1/sandboxes", sandboxes.Spec{}, &i); err != nil {
				b.Fatal(err)
			}
			if err := a.do("DELETE", "/v1/sandboxes/"+i.ID, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
