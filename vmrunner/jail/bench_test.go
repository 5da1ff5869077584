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
		for i := 0; i < b.N; i++ {
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
	})
}
