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
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/serverproc"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// serveProc is a real `agentsandbox serve` process on a unix socket: the
// binary built from this tree, or $AGENTSANDBOX_BENCH_SERVE (another
// build, such as the code before a change, measured in the same run).
type serveProc struct {
	pid int
	c   *http.Client
}

func startServe(tb testing.TB) *serveProc {
	tb.Helper()
	testtier.Root(tb)
	dir := tb.TempDir()
	bin := os.Getenv("AGENTSANDBOX_BENCH_SERVE")
	if bin == "" {
		bin = serverproc.GoBuild(tb, dir, "github.com/agentsandbox/agentsandbox/cmd/agentsandbox")
	}
	sock := filepath.Join(dir, "serve.sock")
	p, _ := serverproc.Start(tb, func(l string) bool { return strings.HasPrefix(l, "serving on unix socket") }, bin,
		"serve", "--state-dir", filepath.Join(dir, "state"), "--socket", sock)
	tb.Cleanup(func() {
		if logs, err := p.Stop(); err != nil {
			tb.Errorf("serve after SIGTERM: %v\n%s", err, logs)
		}
	})
	serverproc.WaitForSocket(tb, sock)
	pid := p.Pid()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}
	return &serveProc{pid: pid, c: &http.Client{Transport: tr}}
}

// cpu is the process's user and system time so far.
func (s *serveProc) cpu(tb testing.TB) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.pid))
	if err != nil {
		tb.Fatal(err)
	}
	// After "(comm)": state is field 3; utime and stime are 14 and 15.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / 100) // USER_HZ
}

// rss is the process's resident set in bytes.
func (s *serveProc) rss(tb testing.TB) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kib, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kib << 10
		}
	}
	tb.Fatal("no VmRSS")
	return 0
}

func (s *serveProc) json(tb testing.TB, method, path string, body, out any) {
	tb.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://sandbox"+path, rd)
	resp, err := s.c.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		tb.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			tb.Fatal(err)
		}
	}
}

func (s *serveProc) kill(id string) error {
	req, _ := http.NewRequest("DELETE", "http://sandbox/v1/sandboxes/"+id, nil)
	resp, err := s.c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("%d %s", resp.StatusCode, raw)
	}
	return nil
}

// streamed is what a client read of an exec's NDJSON stream: every byte
// counted and hashed in order, and what was missing between events.
type streamed struct {
	bytes, lost int64
	gaps        int // events whose offset was past the bytes read so far, or gap events
	sum         string
	exit        *sandboxes.ExitStatus
	events      int
}

// readStream reads an exec's stdout events; pause (when not zero) sleeps
// after each event, a reader slower than the command.
func readStream(tb testing.TB, body io.Reader, pause time.Duration) streamed {
	tb.Helper()
	h := sha256.New()
	var st streamed
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		var ev struct {
			sandboxes.ExecEvent
			Stream string `json:"stream"`
			Next   int64  `json:"next"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			tb.Fatalf("event %q: %v", sc.Bytes(), err)
		}
		st.events++
		switch ev.Type {
		case sandboxes.EventStdout:
			data := []byte(ev.Text)
			if ev.Base64 != nil {
				data = ev.Base64
			}
			if ev.Offset > st.bytes+st.lost {
				st.gaps++
				st.lost += ev.Offset - (st.bytes + st.lost)
			}
			h.Write(data)
			st.bytes += int64(len(data))
		case "gap":
			if ev.Stream == "stdout" {
				st.gaps++
				st.lost += ev.Next - ev.Offset
			}
		case sandboxes.EventExit:
			st.exit = ev.Exit
		case sandboxes.EventError:
			tb.Fatalf("error event: %s", ev.Error)
		}
		if pause > 0 {
			time.Sleep(pause)
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	st.sum = hex.EncodeToString(h.Sum(nil))
	return st
}

func (s *serveProc) exec(tb testing.TB, id string, r sandboxes.ExecRequest, pause time.Duration) streamed {
	tb.Helper()
	b, _ := json.Marshal(r)
	resp, err := s.c.Post("http://sandbox/v1/sandboxes/"+id+"/exec", "application/json", bytes.NewReader(b))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		tb.Fatalf("exec: %d %s", resp.StatusCode, raw)
	}
	return readStream(tb, resp.Body, pause)
}

// patternSum is the sha256 of the first n bytes of line repeated.
func patternSum(line string, n int64) string {
	h := sha256.New()
	block := bytes.Repeat([]byte(line), (1<<20)/len(line)+1)
	block = block[:len(block)/len(line)*len(line)]
	for n > 0 {
		k := min(n, int64(len(block)))
		h.Write(block[:k])
		n -= k
	}
	return hex.EncodeToString(h.Sum(nil))
}

const benchLine = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+/\n" // 65 bytes

// BenchmarkServeOutputCPU: one foreground exec that writes 128 MiB of
// text to stdout as fast as it can, through a real serve process, read
// and checked (count and sha256) by a client in this process. It reports
// serve's CPU per MiB (user and system, all its threads, from /proc)
// beside the job's own (its rusage) and the whole sandbox's (its
// cgroup: the job and the agent that frames its output), and the bytes a
// client lost.
func BenchmarkServeOutputCPU(b *testing.B) {
	const size = 128 << 20
	s := startServe(b)
	var info sandboxes.Info
	s.json(b, "POST", "/v1/sandboxes", sandboxes.Spec{Resources: map[string]any{"timeout": "10m"}}, &info)
	want := patternSum(benchLine, size)
	var server, job, sandbox time.Duration
	var lost int64
	for b.Loop() {
		var before sandboxes.Info
		s.json(b, "GET", "/v1/sandboxes/"+info.ID, nil, &before)
		c0 := s.cpu(b)
		st := s.exec(b, info.ID, sandboxes.ExecRequest{Shell: fmt.Sprintf("yes %q | head -c %d", strings.TrimSuffix(benchLine, "\n"), size)}, 0)
		server += s.cpu(b) - c0
		var after sandboxes.Info
		s.json(b, "GET", "/v1/sandboxes/"+info.ID, nil, &after)
		sandbox += time.Duration(after.Usage.CPUTimeNs - before.Usage.CPUTimeNs)
		if st.exit == nil {
			b.Fatal("no exit")
		}
		job += time.Duration(st.exit.CPUTimeNs)
		lost += size - st.bytes
		if st.bytes == size && st.sum != want {
			b.Errorf("all %d bytes came, but they hash to %s, want %s", size, st.sum, want)
		}
		if st.bytes != size {
			b.Logf("read %d of %d bytes (%d gaps, %d bytes skipped)", st.bytes, size, st.gaps, st.lost)
		}
	}
	n := float64(b.N) * size / (1 << 20)
	b.ReportMetric(float64(server.Milliseconds())/n, "server-ms/MiB")
	b.ReportMetric(float64(job.Milliseconds())/n, "job-ms/MiB")
	b.ReportMetric(float64(sandbox.Milliseconds())/n, "sandbox-ms/MiB")
	b.ReportMetric(float64(lost)/float64(b.N), "lost-bytes")
	b.ReportMetric(float64(s.rss(b))/(1<<20), "rss-MiB")
}

// BenchmarkServeRSS: serve's resident memory over 1,000 foreground execs
// of 256 KiB of stdout each in one sandbox, beside 1,000 execs of `true`
// (no output) in another in the same run, and after both sandboxes are
// killed. Each figure is logged; the metrics are the growth from start
// to the 1,000th exec and what is left after the kills.
func BenchmarkServeRSS(b *testing.B) {
	const execs, size = 1000, 256 << 10
	s := startServe(b)
	for b.Loop() {
		start := s.rss(b)
		var quiet, loud sandboxes.Info
		s.json(b, "POST", "/v1/sandboxes", sandboxes.Spec{}, &quiet)
		s.json(b, "POST", "/v1/sandboxes", sandboxes.Spec{}, &loud)
		opened := s.rss(b)
		for i := range execs {
			if st := s.exec(b, quiet.ID, sandboxes.ExecRequest{Argv: []string{"true"}}, 0); st.exit == nil || st.exit.ExitCode != 0 {
				b.Fatalf("true: %+v", st)
			}
			if i%250 == 249 {
				b.Logf("baseline: after %d execs of true: rss %.1f MiB", i+1, float64(s.rss(b))/(1<<20))
			}
		}
		base := s.rss(b)
		want := patternSum(benchLine, size)
		for i := range execs {
			st := s.exec(b, loud.ID, sandboxes.ExecRequest{Shell: fmt.Sprintf("yes %q | head -c %d", strings.TrimSuffix(benchLine, "\n"), size)}, 0)
			if st.bytes != size || st.sum != want {
				b.Fatalf("exec %d: %d bytes (%d lost), sum %s", i, st.bytes, st.lost, st.sum)
			}
			if i%250 == 249 {
				b.Logf("after %d execs of 256 KiB: rss %.1f MiB", i+1, float64(s.rss(b))/(1<<20))
			}
		}
		full := s.rss(b)
		for _, id := range []string{quiet.ID, loud.ID} {
			if err := s.kill(id); err != nil {
				b.Logf("kill %s: %v", id, err) // its memory is measured all the same
			}
		}
		time.Sleep(2 * time.Second)
		killed := s.rss(b)
		b.Logf("rss: start %.1f MiB, two sandboxes open %.1f, after 1,000 execs of true %.1f, after 1,000 of 256 KiB %.1f, after the kills %.1f",
			mib(start), mib(opened), mib(base), mib(full), mib(killed))
		b.ReportMetric(mib(base-opened), "true-growth-MiB")
		b.ReportMetric(mib(full-base), "output-growth-MiB")
		b.ReportMetric(mib(killed), "after-kill-MiB")
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
