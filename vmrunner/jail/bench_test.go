package jail

import (
	"os/exec"
	"testing"
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
func BenchmarkJobTrue(b *testing.B) {
	for _, c := range []struct {
		name      string
		noSeccomp bool
	}{{"seccomp", false}, {"no-seccomp", true}} {
		b.Run(c.name, func(b *testing.B) {
			cfg, _ := jailFixture(b, "true")
			cfg.NoSeccomp = c.noSeccomp
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
