package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// BenchmarkApplyNoop measures a whole `apply` of a one-step no-op workflow
// in namespace isolation (parse, policy, netns, cgroup, jail, record)
// against a bare `unshare --fork --pid --mount --net --ipc --uts true` in
// the same run. Both report their median as ms/median besides ns/op.
func BenchmarkApplyNoop(b *testing.B) {
	testtier.Root(b)
	unshare := testtier.Command(b, "root", "unshare", "apt-get install util-linux")
	dir := b.TempDir()
	wf := filepath.Join(dir, "noop.yaml")
	if err := os.WriteFile(wf, []byte("apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: noop\nsteps:\n  - name: noop\n    run: \"true\"\n    resources: {timeout: 30s}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	b.Run("apply", func(b *testing.B) {
		times := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			start := time.Now()
			code := Execute(context.Background(), Stdio{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard},
				[]string{"apply", "--isolation", "namespace", "--state-dir", state, wf})
			times = append(times, time.Since(start))
			if code != ExitOK {
				b.Fatalf("apply: exit %d", code)
			}
		}
		reportMedian(b, times)
	})
	b.Run("unshare", func(b *testing.B) {
		times := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			start := time.Now()
			if out, err := exec.Command(unshare, "--fork", "--pid", "--mount", "--net", "--ipc", "--uts", "true").CombinedOutput(); err != nil {
				b.Fatalf("unshare: %v\n%s", err, out)
			}
			times = append(times, time.Since(start))
		}
		reportMedian(b, times)
	})
}

func reportMedian(b *testing.B, times []time.Duration) {
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "ms/median")
}
