package namespace

import (
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/runnertest"
	"github.com/agentsandbox/agentsandbox/vmrunner"
)

// TestIOWriteThrottled runs the same direct-IO write of 3 MiB to the
// workspace twice, without a limit and with ioWrite 1MiB/s, and checks that
// the throttled one takes clearly longer. It is a behaviour check, not a
// speed target. Direct IO because cgroup v1's blkio throttles only IO the
// process submits itself, not the kernel's writeback of buffered writes.
func TestIOWriteThrottled(t *testing.T) {
	b, opts := rootBackend(t)
	const script = "dd if=/dev/zero of=/workspace/f bs=1M count=3 oflag=direct && sync"
	run := func(name string, wbps int64) time.Duration {
		t.Helper()
		spec := suiteOpts.Spec(t, name, runnertest.Sh(script))
		spec.Step.Resources.IOWriteBps = wbps
		start := time.Now()
		res := runnertest.RunStep(t, b, spec)
		took := time.Since(start)
		if res.Status != vmrunner.StatusSucceeded {
			t.Fatalf("%s: status %s (%s); stderr %q", name, res.Status, res.Detail, runnertest.ReadLog(t, spec, guest.StderrFile))
		}
		dd := strings.TrimSpace(runnertest.ReadLog(t, spec, guest.StderrFile))
		t.Logf("%s (ioWrite %d B/s): step took %v; dd says %q", name, wbps, took.Round(time.Millisecond), dd[strings.LastIndex(dd, "\n")+1:])
		assertClean(t, opts, spec)
		return took
	}
	free := run("io-free", 0)
	held := run("io-held", 1<<20)
	if held < 2*time.Second {
		t.Errorf("3 MiB of direct writes at ioWrite 1MiB/s took %v, want at least 2 s: the write was not throttled", held)
	}
	if held < free+time.Second {
		t.Errorf("throttled step took %v, unthrottled %v: want the throttled one clearly longer", held, free)
	}
}
