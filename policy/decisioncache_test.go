package policy

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

var cacheHost = Host{Isolation: []string{"namespace"}, UID: 0}

// cachedDecision loads the default bundle with a cache under root and
// admits w.
func cachedDecision(t *testing.T, root string, opts Options) *Decision {
	t.Helper()
	cache, err := OpenDecisionCache(root)
	if err != nil {
		t.Fatal(err)
	}
	e, err := LoadCached(opts, cache)
	if err != nil {
		t.Fatal(err)
	}
	d, err := e.Eval(context.Background(), generated(3), cacheHost)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func sameDecision(t *testing.T, got, want *Decision) {
	t.Helper()
	if got.ID != want.ID || got.BundleDigest != want.BundleDigest || got.InputDigest != want.InputDigest ||
		!slices.Equal(got.Deny, want.Deny) || !slices.Equal(got.Warn, want.Warn) || !slices.Equal(got.Policies, want.Policies) ||
		!slices.Equal(got.EgressDeny, want.EgressDeny) || len(got.SeccompAllow) != len(want.SeccompAllow) {
		t.Fatalf("decision differs:\ngot  %+v\nwant %+v", got, want)
	}
}

// The second admission of the same workflow under the same bundle is the
// first one's decision, read back without compiling; what the engine
// alone decides is the same.
func TestDecisionCacheHit(t *testing.T) {
	root := filepath.Join(t.TempDir(), "policy-cache")
	direct, err := Load(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := direct.Eval(context.Background(), generated(3), cacheHost)
	if err != nil {
		t.Fatal(err)
	}
	first := cachedDecision(t, root, Options{})
	if first.Cached {
		t.Fatal("the first admission came from an empty cache")
	}
	sameDecision(t, first, want)

	cache, err := OpenDecisionCache(root)
	if err != nil {
		t.Fatal(err)
	}
	e, err := LoadCached(Options{}, cache)
	if err != nil {
		t.Fatal(err)
	}
	second, err := e.Eval(context.Background(), generated(3), cacheHost)
	if err != nil {
		t.Fatal(err)
	}
	if !second.Cached {
		t.Fatal("the second admission was evaluated again")
	}
	sameDecision(t, second, want)
	if e.engine != nil {
		t.Error("a cached decision compiled the policy")
	}
	// Other host facts are another input: evaluated.
	other, err := e.Eval(context.Background(), generated(3), Host{Isolation: []string{"namespace", "vm"}, KVM: true})
	if err != nil {
		t.Fatal(err)
	}
	if other.Cached || other.InputDigest == want.InputDigest {
		t.Error("other host facts got the stored decision")
	}
	// Another workflow too.
	if d, err := e.Eval(context.Background(), generated(4), cacheHost); err != nil || d.Cached {
		t.Errorf("another workflow got a stored decision: %v", err)
	}
	// Both kinds of decision carry the input they were made on.
	if in, _ := InputDocument(generated(3), cacheHost); string(second.Input()) != string(in) || string(first.Input()) != string(in) {
		t.Error("a decision's Input is not its input document")
	}
}

// An entry that is torn, names another decision, or may be written by
// others is not used; the evaluation that replaces it is stored again.
func TestDecisionCacheDistrustsEntries(t *testing.T) {
	root := filepath.Join(t.TempDir(), "policy-cache")
	first := cachedDecision(t, root, Options{})
	cache, err := OpenDecisionCache(root)
	if err != nil {
		t.Fatal(err)
	}
	path := cache.path(first.ID)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the decision was not stored: %v", err)
	}
	for name, damage := range map[string]func(){
		"torn":           func() { os.WriteFile(path, whole[:len(whole)/2], 0o600) },
		"empty":          func() { os.WriteFile(path, nil, 0o600) },
		"unknown field":  func() { os.WriteFile(path, append(slices.Clone(whole[:len(whole)-1]), `,"x":1}`...), 0o600) },
		"group-writable": func() { os.WriteFile(path, whole, 0o600); os.Chmod(path, 0o620) },
		"a directory":    func() { os.Remove(path); os.Mkdir(path, 0o700) },
		"another id": func() {
			// The same bytes under another decision's name.
			os.WriteFile(path, whole, 0o600)
			os.Rename(path, cache.path(decisionID(first.BundleDigest, Digest{1})))
		},
	} {
		t.Run(name, func(t *testing.T) {
			damage()
			d := cachedDecision(t, root, Options{})
			if d.Cached {
				t.Fatalf("a %s entry was trusted", name)
			}
			sameDecision(t, d, first)
			os.RemoveAll(path)
			os.WriteFile(path, whole, 0o600)
			if d := cachedDecision(t, root, Options{}); !d.Cached {
				t.Fatal("the whole entry was not used again")
			}
		})
	}
}

// Without a state directory nothing is stored and nothing is created.
func TestDecisionCacheNeedsStateDir(t *testing.T) {
	state := filepath.Join(t.TempDir(), "missing-state")
	d := cachedDecision(t, filepath.Join(state, "policy-cache"), Options{})
	if d.Cached {
		t.Fatal("cached from nowhere")
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("the cache created a state directory: %v", err)
	}
	// And a nil cache evaluates every time.
	e, err := LoadCached(Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if d, err := e.Eval(context.Background(), generated(2), cacheHost); err != nil || d.Cached {
			t.Fatalf("no cache: %v, cached %v", err, d != nil && d.Cached)
		}
	}
}

// gc removes other executables' directories and entries unused for
// longer than the age given, and keeps the rest.
func TestGCDecisionCache(t *testing.T) {
	root := filepath.Join(t.TempDir(), "policy-cache")
	d := cachedDecision(t, root, Options{})
	cache, err := OpenDecisionCache(root)
	if err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(root, "exe-0123456789abcdef01234567")
	if err := os.MkdirAll(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	old := cache.path(decisionID(d.BundleDigest, Digest{2}))
	if err := os.WriteFile(old, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-60 * 24 * time.Hour)
	if err := os.Chtimes(old, long, long); err != nil {
		t.Fatal(err)
	}
	removed, err := GCDecisionCache(root, 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	want := []string{old, stale}
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Fatalf("removed %q, want %q", removed, want)
	}
	if _, err := os.Stat(cache.path(d.ID)); err != nil {
		t.Errorf("a recent entry was removed: %v", err)
	}
	if removed, err := GCDecisionCache(filepath.Join(t.TempDir(), "none"), time.Hour); err != nil || len(removed) != 0 {
		t.Errorf("gc of no cache: %v %q", err, removed)
	}
}
