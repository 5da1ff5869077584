package policy

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestSeccompAllowFromData(t *testing.T) {
	data := writeFile(t, filepath.Join(t.TempDir(), "team.yaml"), `
agentsandbox:
  seccomp:
    allow:
      "*": [perf_event_open]
      profile: [userfaultfd, perf_event_open, userfaultfd]
`)
	e := load(t, Options{DataFiles: []string{data}})
	d := eval(t, e, okWorkflow(), vmHost)
	want := map[string][]string{"*": {"perf_event_open"}, "profile": {"perf_event_open", "userfaultfd"}}
	if !reflect.DeepEqual(d.SeccompAllow, want) {
		t.Errorf("SeccompAllow = %v, want %v", d.SeccompAllow, want)
	}
	if got := d.SeccompAllowFor("profile"); !reflect.DeepEqual(got, []string{"perf_event_open", "userfaultfd"}) {
		t.Errorf("for profile: %q", got)
	}
	if got := d.SeccompAllowFor("build"); !reflect.DeepEqual(got, []string{"perf_event_open"}) {
		t.Errorf("for build: %q", got)
	}
	plain := eval(t, load(t, Options{}), okWorkflow(), vmHost)
	if plain.SeccompAllow != nil || plain.SeccompAllowFor("build") != nil {
		t.Errorf("default data grants %v", plain.SeccompAllow)
	}
	if e.BundleDigest() == load(t, Options{}).BundleDigest() {
		t.Error("the allowance is not part of the bundle digest")
	}
}

func TestSeccompAllowBadShape(t *testing.T) {
	for _, doc := range []string{
		"agentsandbox:\n  seccomp: [perf_event_open]\n",
		"agentsandbox:\n  seccomp:\n    allow: [perf_event_open]\n",
		"agentsandbox:\n  seccomp:\n    allow:\n      build: perf_event_open\n",
		"agentsandbox:\n  seccomp:\n    allow:\n      build: [1]\n",
	} {
		data := writeFile(t, filepath.Join(t.TempDir(), "d.yaml"), doc)
		_, err := Load(context.Background(), Options{DataFiles: []string{data}})
		if err == nil || !strings.Contains(err.Error(), "seccomp") {
			t.Errorf("%q: Load = %v, want an error about the seccomp data", doc, err)
		}
	}
}
