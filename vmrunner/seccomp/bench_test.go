package seccomp

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkAssemble is compiling the default profile to BPF, which the
// jail's parent does to check it and its init does to load it.
func BenchmarkAssemble(b *testing.B) {
	p, err := Default()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		pol, err := p.Policy()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := pol.Assemble(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDefault is deriving the default profile from Docker's.
func BenchmarkDefault(b *testing.B) {
	for b.Loop() {
		if _, err := Default(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSyscall is one cheap system call (getppid, number 110 on
// x86_64, so about a third of the way down the filter's list) with and
// without the default filter: the filter's cost per call. The filtered
// case runs in a child process, since a filter cannot be removed.
func BenchmarkSyscall(b *testing.B) {
	b.Run("no-filter", func(b *testing.B) {
		for b.Loop() {
			unix.Getppid()
		}
	})
	b.Run("filter", func(b *testing.B) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSyscallLoopChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "SECCOMP_LOOP_CHILD="+strconv.Itoa(b.N))
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("child: %v\n%s", err, out)
		}
		_, v, _ := strings.Cut(string(out), "ns=")
		ns, err := strconv.ParseFloat(strings.Fields(v)[0], 64)
		if err != nil {
			b.Fatalf("child output %q", out)
		}
		b.ReportMetric(ns/float64(b.N), "ns/call")
	})
}

// TestSyscallLoopChild is BenchmarkSyscall's child; otherwise it does
// nothing.
func TestSyscallLoopChild(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("SECCOMP_LOOP_CHILD"))
	if err != nil {
		return
	}
	p, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Install(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for range n {
		unix.Getppid()
	}
	fmt.Printf("ns=%d\n", time.Since(start).Nanoseconds())
}
