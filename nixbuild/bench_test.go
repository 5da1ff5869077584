package nixbuild

import (
	"context"
	"os/exec"
	"testing"
)

// BenchmarkRealise measures a first build of a fresh flake (new nonce, so
// Nix evaluates and builds), a second build with the same flake and lock
// (what an unchanged workflow costs on rerun), the bare nix command doing
// that second build without this package (the baseline), and the closure
// listing. Results are in docs/benchmarks.md under "Nix realisation".
func BenchmarkRealise(b *testing.B) {
	attrs := []string{attrHello, attrTree}
	ctx := context.Background()

	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			fx := newFixture(b)
			b.StartTimer()
			if _, err := Build(ctx, fx.flakeDir, attrs, Options{Offline: true, LockFile: fx.lock}); err != nil {
				b.Fatal(err)
			}
		}
	})

	fx := newFixture(b)
	o := Options{Offline: true, LockFile: fx.lock}
	outs, err := Build(ctx, fx.flakeDir, attrs, o)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			if _, err := Build(ctx, fx.flakeDir, attrs, o); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached-bare-nix", func(b *testing.B) {
		argv := buildArgs(fx.flakeDir, attrs, Options{Offline: true, Locked: true})
		for b.Loop() {
			if out, err := exec.Command("nix", argv[1:]...).CombinedOutput(); err != nil {
				b.Fatalf("%v\n%s", err, out)
			}
		}
	})
	b.Run("closure", func(b *testing.B) {
		for b.Loop() {
			if _, err := Closure(ctx, []string{outs[1].Out}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
