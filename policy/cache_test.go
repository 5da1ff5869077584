package policy

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestLoadCachesByBundle(t *testing.T) {
	ctx := context.Background()
	a, err := Load(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("the same bundle was compiled twice")
	}

	// Other data, or the same rules read from another folder (messages
	// name the file), is another engine.
	data := filepath.Join(t.TempDir(), "data.json")
	if err := os.WriteFile(data, []byte(`{"agentsandbox": {"x": 1}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(ctx, Options{DataFiles: []string{data}})
	if err != nil {
		t.Fatal(err)
	}
	if c == a || c.BundleDigest() == a.BundleDigest() {
		t.Error("other data shares the default bundle's engine")
	}
	rule := []byte("package agentsandbox\n\ndeny contains \"no\" if { input.x }\n")
	var dirs []string
	for range 2 {
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, "team.rego"), rule, 0o644); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	e1, err := Load(ctx, Options{Dirs: dirs[:1], NoDefault: true})
	if err != nil {
		t.Fatal(err)
	}
	e2, err := Load(ctx, Options{Dirs: dirs[1:], NoDefault: true})
	if err != nil {
		t.Fatal(err)
	}
	if e1.BundleDigest() != e2.BundleDigest() {
		t.Error("the same rule in two folders has two digests")
	}
	if e1 == e2 {
		t.Error("rules read from two folders share one engine; its messages would name the wrong file")
	}
	// A changed file is read again and compiled again.
	if err := os.WriteFile(filepath.Join(dirs[0], "team.rego"), append(rule, []byte("\nwarn contains \"w\" if { true }\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	e3, err := Load(ctx, Options{Dirs: dirs[:1], NoDefault: true})
	if err != nil {
		t.Fatal(err)
	}
	if e3 == e1 {
		t.Error("a changed policy file returned the old engine")
	}
}

func TestEngineCacheIsBounded(t *testing.T) {
	c := &engineCache{m: map[string]*Engine{}}
	for i := range 3 * maxCachedEngines {
		c.put(string(rune('a'+i)), &Engine{})
	}
	if len(c.m) > maxCachedEngines {
		t.Fatalf("cache holds %d engines, bound %d", len(c.m), maxCachedEngines)
	}
}
