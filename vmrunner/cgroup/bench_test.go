package cgroup

import (
	"fmt"
	"os"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// BenchmarkNewDelete is a step's cgroup cost without a process in it:
// New with a step's usual limits, Usage, Delete (root).
func BenchmarkNewDelete(b *testing.B) {
	testtier.Root(b)
	if Mode() == "unavailable" {
		testtier.Skip(b, "root", "no cgroup file system mounted")
	}
	l := Limits{MemoryBytes: 256 << 20, PIDs: 256, VCPU: 1}
	for i := 0; i < b.N; i++ {
		g, err := New(fmt.Sprintf("/agentsandbox-bench/%d/%d", os.Getpid(), i), l)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := g.Usage(); err != nil {
			b.Fatal(err)
		}
		if err := g.Delete(); err != nil {
			b.Fatal(err)
		}
	}
}
