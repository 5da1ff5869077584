package netns

import (
	"fmt"
	"os"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// BenchmarkCreateDelete is a step's whole netns cost: create the namespace
// with lo up, then delete it (root).
func BenchmarkCreateDelete(b *testing.B) {
	testtier.Root(b)
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("%sbench-%d-%d", Prefix, os.Getpid(), i)
		ns, err := Create(name)
		if err != nil {
			b.Fatal(err)
		}
		if err := ns.Delete(); err != nil {
			b.Fatal(err)
		}
	}
}
