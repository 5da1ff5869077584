package namespace

import (
	"context"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/runnertest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/vmrunner"
)

// reportMedian adds the median of the iterations' durations as ms/median.
func reportMedian(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2])/float64(time.Millisecond), "ms/median")
}

// BenchmarkNoopStep runs one no-op step (`true`) through the whole backend
// (netns, cgroup, jail, agent, result, cleanup) next to the bare
// `unshare --fork --pid --mount --net --ipc --uts true` it is measured
// against. Targets: backend median under 100 ms and within 5× of unshare.
func BenchmarkNoopStep(b *testing.B) {
	testtier.Root(b)
	b.Run("backend", func(b *testing.B) {
		be := New(Options{StateDir: b.TempDir(), JailDir: b.TempDir()})
		var ds []time.Duration
		for b.Loop() {
			b.StopTimer()
			spec := suiteOpts.Spec(b, "noop", []string{"true"})
			runnertest.WriteJob(b, spec)
			b.StartTimer()
			start := time.Now()
			res, err := vmrunner.RunStep(context.Background(), be, spec)
			ds = append(ds, time.Since(start))
			if err != nil || res.Status != vmrunner.StatusSucceeded {
				b.Fatalf("Run: %+v, %v", res, err)
			}
		}
		reportMedian(b, ds)
	})
	b.Run("unshare", func(b *testing.B) {
		unshare := testtier.Command(b, "root", "unshare", "util-linux")
		var ds []time.Duration
		for b.Loop() {
			start := time.Now()
			out, err := exec.Command(unshare, "--fork", "--pid", "--mount", "--net", "--ipc", "--uts", "true").CombinedOutput()
			ds = append(ds, time.Since(start))
			if err != nil {
				b.Fatalf("unshare: %v: %s", err, out)
			}
		}
		reportMedian(b, ds)
	})
}

// BenchmarkSessionExec runs `true` in a warm session (Exec to its exit
// event, a connection each) next to a one-shot Run of the same command,
// which builds and removes a whole sandbox each time. Target: session p50
// under 10 ms.
func BenchmarkSessionExec(b *testing.B) {
	testtier.Root(b)
	b.Run("session", func(b *testing.B) {
		s, spec, _ := openSession(b)
		q := runnertest.SessionRequest(spec, "true")
		var ds []time.Duration
		for b.Loop() {
			start := time.Now()
			x, err := s.Exec(context.Background(), q)
			if err != nil {
				b.Fatal(err)
			}
			var exit bool
			for ev := range x.Events() {
				exit = exit || ev.Type == "exit" && ev.ExitCode == 0
			}
			x.Close()
			ds = append(ds, time.Since(start))
			if !exit {
				b.Fatalf("no exit 0: %v", x.(*Exec).Err())
			}
		}
		reportMedian(b, ds)
		reportP99(b, ds)
	})
	b.Run("oneshot", func(b *testing.B) {
		be := New(Options{StateDir: b.TempDir(), JailDir: b.TempDir()})
		var ds []time.Duration
		for b.Loop() {
			b.StopTimer()
			spec := suiteOpts.Spec(b, "noop", []string{"true"})
			runnertest.WriteJob(b, spec)
			b.StartTimer()
			start := time.Now()
			res, err := vmrunner.RunStep(context.Background(), be, spec)
			ds = append(ds, time.Since(start))
			if err != nil || res.Status != vmrunner.StatusSucceeded {
				b.Fatalf("Run: %+v, %v", res, err)
			}
		}
		reportMedian(b, ds)
	})
}

// reportP99 adds the 99th percentile of d (sorted by reportMedian) as
// ms/p99.
func reportP99(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	b.ReportMetric(float64(d[len(d)*99/100])/float64(time.Millisecond), "ms/p99")
}
