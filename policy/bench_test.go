package policy

import (
	"context"
	"path/filepath"
	"testing"
)

// BenchmarkEvalDefault100Steps is the figure docs/benchmarks.md records:
// the default policy, prepared once, on a 100-step workflow. Target: under
// 5 ms per evaluation.
func BenchmarkEvalDefault100Steps(b *testing.B) {
	e := load(b, Options{})
	w := generated(100)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Eval(ctx, w, vmHost); err != nil {
			b.Fatal(err)
		}
	}
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
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Eval(ctx, w, vmHost); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInputDocument is the encoding part alone.
func BenchmarkInputDocument(b *testing.B) {
	w := generated(100)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := InputDocument(w, vmHost); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadDefault is the one-time cost: read, compile, prepare.
func BenchmarkLoadDefault(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load(ctx, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
