package nixbuild

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
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

// BenchmarkShare is a second machine getting a closure: "build" realises a
// fresh flake in an empty store of its own (A's cost), "substitute" gets
// the same closure, which A pushed signed to a file:// cache served over
// loopback HTTP, into another empty store with --max-jobs 0 (B's cost).
// Both start from empty stores, so both copy the flake's inputs first.
// Results are in docs/benchmarks.md under "Sharing closures".
func BenchmarkShare(b *testing.B) {
	testtier.Root(b)
	ctx := context.Background()
	b.Setenv("NIX_CONFIG", "substituters =\nnarinfo-cache-negative-ttl = 0")
	dir := b.TempDir()
	keyFile := filepath.Join(dir, "key")
	secret, err := exec.Command("nix", "--extra-experimental-features", ExperimentalFeatures, "key", "generate-secret", "--key-name", "bench-1").Output()
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(keyFile, secret, 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("nix", "--extra-experimental-features", ExperimentalFeatures, "key", "convert-secret-to-public")
	cmd.Stdin = bytes.NewReader(secret)
	pub, err := cmd.Output()
	if err != nil {
		b.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	srv := httptest.NewServer(http.FileServer(http.Dir(cache)))
	defer srv.Close()
	attrs := []string{attrTree}
	share := Sharing{Push: "file://" + cache, SigningKeyFile: keyFile}
	subst := Sharing{Substituters: []string{srv.URL}, TrustedPublicKeys: []string{strings.TrimSpace(string(pub))}, MaxJobs: "0"}
	var build, substitute time.Duration
	n := 0
	for b.Loop() {
		b.StopTimer()
		fx := newFixture(b)
		storeA, storeB := b.TempDir(), b.TempDir()
		b.StartTimer()
		t0 := time.Now()
		outs, err := Build(ctx, fx.flakeDir, attrs, Options{Store: storeA, LockFile: fx.lock})
		if err != nil {
			b.Fatal(err)
		}
		build += time.Since(t0)
		b.StopTimer()
		if err := Push(ctx, share, "", storeA, []string{outs[0].Out}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 = time.Now()
		if _, err := Build(ctx, fx.flakeDir, attrs, Options{Store: storeB, LockFile: fx.lock, Share: subst}); err != nil {
			b.Fatal(err)
		}
		substitute += time.Since(t0)
		n++
	}
	b.ReportMetric(float64(build.Milliseconds())/float64(n), "build-ms")
	b.ReportMetric(float64(substitute.Milliseconds())/float64(n), "substitute-ms")
}
