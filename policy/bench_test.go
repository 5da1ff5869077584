package policy

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user+system CPU time. The benchmarks report it
// per operation beside wall time, because on a shared machine wall time
// mostly measures the other tenants.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loop runs f b.N times and reports cpu-ns/op.
func loop(b *testing.B, f func() error) {
	b.ReportAllocs()
	start := cpuTime(b)
	n := 0
	for b.Loop() {
		if err := f(); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(cpuTime(b)-start)/float64(n), "cpu-ns/op")
}

// BenchmarkEvalDefault100Steps is the figure docs/benchmarks.md records:
// the default policy, prepared once, on a 100-step workflow. Target: under
// 5 ms per evaluation.
func BenchmarkEvalDefault100Steps(b *testing.B) {
	e := load(b, Options{})
	w := generated(100)
	ctx := context.Background()
	loop(b, func() error {
		_, err := e.Eval(ctx, w, vmHost)
		return err
	})
}

// BenchmarkEvalTrivial100Steps is the baseline beside it: one constant rule
// on the same input, so the difference is the cost of the default rules
// (the rest is encoding and converting the input document).
func BenchmarkEvalTrivial100Steps(b *testing.B) {
	dir := b.TempDir()
	writeFile(b, filepath.Join(dir, "p.rego"), "package agentsandbox\n\ndeny contains \"x\" if { input.workflow.name == \"nope\" }\n")
	e := load(b, Options{Dirs: []string{dir}, NoDefault: true})
	w := generated(100)
	ctx := context.Background()
	loop(b, func() error {
		_, err := e.Eval(ctx, w, vmHost)
		return err
	})
}

// BenchmarkInputDocument is the encoding part alone.
func BenchmarkInputDocument(b *testing.B) {
	w := generated(100)
	loop(b, func() error {
		_, err := InputDocument(w, vmHost)
		return err
	})
}

// BenchmarkLoadDefault is the one-time cost: read, compile, prepare (the
// engine cache is emptied before each load).
func BenchmarkLoadDefault(b *testing.B) {
	ctx := context.Background()
	loop(b, func() error {
		engines.reset()
		_, err := Load(ctx, Options{})
		return err
	})
}

// BenchmarkLoadDefaultCached is every later Load of the same bundle in the
// same process: read the sources, digest them, find the engine.
func BenchmarkLoadDefaultCached(b *testing.B) {
	ctx := context.Background()
	if _, err := Load(ctx, Options{}); err != nil {
		b.Fatal(err)
	}
	loop(b, func() error {
		_, err := Load(ctx, Options{})
		return err
	})
}

// BenchmarkAdmitProcess is what one process pays to admit a workflow of
// 1, 100 or 1,000 steps under the default policy: "evaluated" reads,
// compiles and evaluates (the engine cache emptied first, as in a new
// process); "cached" reads the sources and finds the decision in a
// DecisionCache, which a process that admitted the same workflow before
// left there. The first is the baseline of the second.
func BenchmarkAdmitProcess(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 100, 1000} {
		w := generated(n)
		b.Run(fmt.Sprintf("steps=%d/evaluated", n), func(b *testing.B) {
			loop(b, func() error {
				engines.reset()
				e, err := LoadCached(Options{}, nil)
				if err != nil {
					return err
				}
				_, err = e.Eval(ctx, w, vmHost)
				return err
			})
		})
		b.Run(fmt.Sprintf("steps=%d/cached", n), func(b *testing.B) {
			cache, err := OpenDecisionCache(filepath.Join(b.TempDir(), "policy-cache"))
			if err != nil {
				b.Fatal(err)
			}
			warm, err := LoadCached(Options{}, cache)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := warm.Eval(ctx, w, vmHost); err != nil {
				b.Fatal(err)
			}
			loop(b, func() error {
				engines.reset()
				e, err := LoadCached(Options{}, cache)
				if err != nil {
					return err
				}
				d, err := e.Eval(ctx, w, vmHost)
				if err == nil && !d.Cached {
					err = fmt.Errorf("not from the cache")
				}
				return err
			})
		})
	}
}
