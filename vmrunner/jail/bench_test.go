package jail

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkExecTrue is the exec-mode jail's own cost: /bin/true run in a
// jail (start, netns join, root built, pivot, privilege drop, exec, exit)
// against the same /bin/true started directly, side by side.
func BenchmarkExecTrue(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("jail", func(b *testing.B) {
		cfg, _ := execFixture(b, "")
		cfg.Exec.Argv = []string{"/bin/true"}
		benchJail(b, cfg)
	})
	b.Run("jail-no-seccomp", func(b *testing.B) {
		cfg, _ := execFixture(b, "")
		cfg.Exec.Argv = []string{"/bin/true"}
		cfg.NoSeccomp = true
		benchJail(b, cfg)
	})
}

// BenchmarkJobTrue is a no-op job (`sh -c true` through the agent) in a
// job-mode jail, with the default seccomp filter and without it: what the
// filter adds (compiling it in the parent, loading it on every thread in
// the init, and running it on every system call of the init, the agent and
// the job).
//
// The test-binary case is the baseline: this test binary re-executing
// itself as the init, as the CLI did before the agent took over.
func BenchmarkJobTrue(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		noSeccomp bool
		init      string
	}{{"seccomp", false, ""}, {"no-seccomp", true, ""}, {"seccomp-test-binary", false, exe}} {
		b.Run(c.name, func(b *testing.B) {
			cfg, _ := jailFixture(b, "true")
			cfg.NoSeccomp = c.noSeccomp
			cfg.InitPath = c.init
			benchJail(b, cfg)
		})
	}
}

func benchJail(b *testing.B, cfg Config) {
	b.Helper()
	for b.Loop() {
		p, err := Start(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Release(); err != nil {
			b.Fatal(err)
		}
		if err := p.Wait(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStepRSS is the host memory a running step holds: the resident
// set of the jail's init and of every process under it, read from /proc
// while a `sleep` job runs, with the agent as init and, as the baseline,
// this test binary re-executing itself the way the CLI used to. Reported
// as init-KiB (the init alone), init-anon-KiB (its private part: the text
// pages of the binary are shared by every step's init through the page
// cache) and step-KiB (the init, the shell and sleep).
func BenchmarkStepRSS(b *testing.B) {
	agent, err := AgentPath()
	if err != nil {
		b.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, init string }{{"agent", agent}, {"test-binary", exe}} {
		b.Run(c.name, func(b *testing.B) {
			cfg, _ := jailFixture(b, "sleep 60")
			cfg.InitPath = c.init
			var initKiB, anonKiB, stepKiB, n float64
			for b.Loop() {
				p, err := Start(cfg)
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Release(); err != nil {
					b.Fatal(err)
				}
				pids := waitForDescendant(b, p.Pid(), "sleep")
				initKiB += float64(statusKiB(b, p.Pid(), "VmRSS"))
				anonKiB += float64(statusKiB(b, p.Pid(), "RssAnon"))
				for _, pid := range pids {
					stepKiB += float64(statusKiB(b, pid, "VmRSS"))
				}
				n++
				_ = p.Kill()
				_ = p.Wait()
			}
			b.ReportMetric(initKiB/n, "init-KiB")
			b.ReportMetric(anonKiB/n, "init-anon-KiB")
			b.ReportMetric(stepKiB/n, "step-KiB")
		})
	}
}

// waitForDescendant waits until a process named comm runs under pid and
// returns pid and all of its descendants.
func waitForDescendant(b testing.TB, pid int, comm string) []int {
	b.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		pids := descendants(pid)
		for _, p := range pids {
			if c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p)); strings.TrimSpace(string(c)) == comm {
				return pids
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	b.Fatalf("no %s under pid %d after 10s", comm, pid)
	return nil
}

// descendants is pid and every process under it, from /proc's children lists.
func descendants(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", out[i]))
		for _, t := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", out[i], t.Name()))
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// statusKiB is a field of pid's /proc status in KiB, such as VmRSS.
func statusKiB(b testing.TB, pid int, field string) int {
	b.Helper()
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(s), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				b.Fatalf("parse %q: %v", line, err)
			}
			return kib
		}
	}
	b.Fatalf("no %s for pid %d", field, pid)
	return 0
}
