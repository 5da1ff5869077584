package nixbuild

import (
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

// TestRealNixSubstitution is two machines sharing one binary cache, as two
// Nix stores of their own (--store DIR) and a file:// cache served over
// HTTP on loopback: A builds and pushes its closure signed; B, which may
// build nothing (--max-jobs 0), gets the same paths by substitution; a
// store trusting another key, and a cache whose paths are unsigned, are
// refused by Nix.
func TestRealNixSubstitution(t *testing.T) {
	fx := newFixture(t)
	testtier.Root(t) // chroot stores (--store DIR) need root here
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Only the caches the test names: no default substituter, and no
	// cached "not there" from an earlier query.
	t.Setenv("NIX_CONFIG", "substituters =\nnarinfo-cache-negative-ttl = 0")

	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	secret := nixOutput(t, "key", "generate-secret", "--key-name", "node-a-1")
	if err := os.WriteFile(keyFile, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	pub := pubKey(t, keyFile)
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, []byte(nixOutput(t, "key", "generate-secret", "--key-name", "someone-else-1")), 0o600); err != nil {
		t.Fatal(err)
	}
	otherPub := pubKey(t, other)

	cache := filepath.Join(dir, "cache")
	storeA := filepath.Join(dir, "store-a")
	shareA := Sharing{Push: "file://" + cache, SigningKeyFile: keyFile}
	outs, err := Build(ctx, fx.flakeDir, []string{attrTree}, Options{Store: storeA, LockFile: fx.lock, Share: shareA})
	if err != nil {
		t.Fatal(err)
	}
	if err := Push(ctx, shareA, "", storeA, []string{outs[0].Out}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(cache)))
	defer srv.Close()

	// B substitutes every path of A's closure and builds none.
	storeB := filepath.Join(dir, "store-b")
	shareB := Sharing{Substituters: []string{srv.URL}, TrustedPublicKeys: []string{pub}, MaxJobs: "0"}
	got, err := Build(ctx, fx.flakeDir, []string{attrTree}, Options{Store: storeB, LockFile: fx.lock, Share: shareB})
	if err != nil {
		t.Fatalf("B's build from A's cache: %v", err)
	}
	if got[0].Out != outs[0].Out {
		t.Fatalf("B got %s, A built %s", got[0].Out, outs[0].Out)
	}
	closureA, err := ClosureIn(ctx, storeA, []string{outs[0].Out})
	if err != nil {
		t.Fatal(err)
	}
	closureB, err := ClosureIn(ctx, storeB, []string{got[0].Out})
	if err != nil {
		t.Fatal(err)
	}
	if len(closureB) != 2 || len(closureA) != len(closureB) {
		t.Fatalf("closures: A %d paths, B %d", len(closureA), len(closureB))
	}
	for i := range closureA {
		if closureA[i].Path != closureB[i].Path || closureA[i].NarHash != closureB[i].NarHash {
			t.Errorf("closure path %d: A %+v, B %+v", i, closureA[i], closureB[i])
		}
	}

	// A store that trusts only another key gets nothing and may build nothing.
	_, err = Build(ctx, fx.flakeDir, []string{attrTree}, Options{Store: filepath.Join(dir, "store-c"), LockFile: fx.lock,
		Share: Sharing{Substituters: []string{srv.URL}, TrustedPublicKeys: []string{otherPub}, MaxJobs: "0"}})
	if err == nil {
		t.Fatal("a store trusting another key substituted A's paths")
	}
	if !strings.Contains(err.Error(), "not signed by any of the keys") {
		t.Errorf("the refusal of another key's paths does not say why: %v", err)
	}

	// A cache whose paths are unsigned (copied from a store that never
	// signed them) is refused even with A's key trusted.
	storeU := filepath.Join(dir, "store-u")
	unsigned := filepath.Join(dir, "unsigned")
	outsU, err := Build(ctx, fx.flakeDir, []string{attrTree}, Options{Store: storeU, LockFile: fx.lock})
	if err != nil {
		t.Fatal(err)
	}
	nix, _ := LookNix("")
	if _, err := run(ctx, nix, copyArgs(storeU, "file://"+unsigned, []string{outsU[0].Out}), nil); err != nil {
		t.Fatal(err)
	}
	srvU := httptest.NewServer(http.FileServer(http.Dir(unsigned)))
	defer srvU.Close()
	_, err = Build(ctx, fx.flakeDir, []string{attrTree}, Options{Store: filepath.Join(dir, "store-d"), LockFile: fx.lock,
		Share: Sharing{Substituters: []string{srvU.URL}, TrustedPublicKeys: []string{pub}, MaxJobs: "0"}})
	if err == nil {
		t.Fatal("unsigned paths were substituted")
	}
	if !strings.Contains(err.Error(), "not signed by any of the keys") {
		t.Errorf("the refusal of unsigned paths does not say why: %v", err)
	}
}

func pubKey(t *testing.T, secretFile string) string {
	t.Helper()
	f, err := os.Open(secretFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("nix", "--extra-experimental-features", ExperimentalFeatures, "key", "convert-secret-to-public")
	cmd.Stdin = f
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nix key convert-secret-to-public: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestRealNixRemoteBuilder: with --max-jobs 0 nothing is built here, and
// --builders hands the build to another machine: a store directory of its
// own stands in for it (Nix's "local store at DIR" builder), and the
// output built there comes back.
func TestRealNixRemoteBuilder(t *testing.T) {
	fx := newFixture(t)
	testtier.Root(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t.Setenv("NIX_CONFIG", "substituters =")
	dir := t.TempDir()
	remote, local := filepath.Join(dir, "builder"), filepath.Join(dir, "here")
	if _, err := Build(ctx, fx.flakeDir, []string{attrHello}, Options{Store: local, LockFile: fx.lock, Share: Sharing{MaxJobs: "0"}}); err == nil {
		t.Fatal("built with --max-jobs 0 and no builder")
	}
	outs, err := Build(ctx, fx.flakeDir, []string{attrHello}, Options{Store: local, LockFile: fx.lock,
		Share: Sharing{MaxJobs: "0", Builders: remote + " x86_64-linux"}})
	if err != nil {
		t.Fatalf("build on the remote builder: %v", err)
	}
	for _, store := range []string{local, remote} {
		if _, err := ClosureIn(ctx, store, []string{outs[0].Out}); err != nil {
			t.Errorf("%s has no %s: %v", store, outs[0].Out, err)
		}
	}
}
