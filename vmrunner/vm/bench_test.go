package vm

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/runnertest"
	"github.com/agentsandbox/agentsandbox/nixbuild"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// markTimer records when a console marker first appears.
type markTimer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	start time.Time
	at    time.Duration
}

func (m *markTimer) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.at == 0 {
		m.buf.Write(p)
		if strings.Contains(m.buf.String(), guest.ConsoleStartLine) {
			m.at = time.Since(m.start)
		}
	}
	return len(p), nil
}

// BenchmarkBoot compares one hello step through the backend with a bare
// qemu-system-x86_64 boot of the same fixture (same kernel, initramfs and
// command line), both under TCG: ms-to-start is the time until the job's
// first instruction (the agent's start marker on the console), ms-total
// the whole run until the hypervisor exited and everything was cleaned up.
func BenchmarkBoot(b *testing.B) {
	fx := fixture(b)
	job := guest.Job{Version: guest.ProtocolVersion, Step: "hello", Command: []string{"sh", "-c", "echo hello > out.txt"},
		Env: []string{"PATH=/usr/bin:/bin"}, Workdir: guest.WorkspaceMount, UID: guest.DefaultUID, GID: guest.DefaultGID, TimeoutMS: 30_000}

	b.Run("bare-qemu", func(b *testing.B) {
		var start, total time.Duration
		for i := 0; i < b.N; i++ {
			dir := b.TempDir()
			for _, d := range []string{"control", "workspace"} {
				os.Mkdir(filepath.Join(dir, d), 0o777)
			}
			jb := []byte(`{"version":1,"step":"hello","command":["sh","-c","echo hello > out.txt"],"env":["PATH=/usr/bin:/bin"],"workdir":"/workspace","uid":0,"gid":0,"timeoutMs":30000}`)
			os.WriteFile(filepath.Join(dir, "control", guest.JobFile), jb, 0o600)
			argv := fx.Runner.QemuArgs("tcg")
			m := &markTimer{start: time.Now()}
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Dir, cmd.Stdout, cmd.Stderr = dir, m, m
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
			if m.at == 0 {
				b.Fatalf("no start marker; console:\n%s", m.buf.String())
			}
			start += m.at
			total += time.Since(m.start)
		}
		b.ReportMetric(float64(start.Milliseconds())/float64(b.N), "ms-to-start")
		b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-total")
	})

	b.Run("backend", func(b *testing.B) {
		be := newBackend(b, Options{})
		// The pipeline passes the runner's closure; so does the benchmark,
		// or every run would ask Nix for it.
		infos, err := nixbuild.Closure(context.Background(), []string{fx.Dir})
		if err != nil {
			b.Fatal(err)
		}
		var closure []string
		for _, pi := range infos {
			closure = append(closure, pi.Path)
		}
		var start, total time.Duration
		for i := 0; i < b.N; i++ {
			spec := vmrunner.StepSpec{
				RunID: runnertest.RunID(b),
				Step: workflow.Step{Name: "hello", Isolation: workflow.IsolationVM,
					Resources: workflow.Resources{VCPU: 1, Memory: 256 << 20, TimeoutMS: 30_000}},
				Job: job, Workspace: b.TempDir(), ControlDir: b.TempDir(), Runner: fx.Dir,
				ClosurePaths: closure,
			}
			runnertest.WriteJob(b, spec)
			m := &markTimer{start: time.Now()}
			spec.Console = m
			res, err := vmrunner.RunStep(context.Background(), be, spec)
			if err != nil || res.Status != vmrunner.StatusSucceeded {
				b.Fatalf("run: %+v %v", res, err)
			}
			start += m.at
			total += time.Since(m.start)
		}
		b.ReportMetric(float64(start.Milliseconds())/float64(b.N), "ms-to-start")
		b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-total")
	})
}
