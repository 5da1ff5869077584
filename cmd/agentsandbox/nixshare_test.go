package main

import (
	"strings"
	"testing"
)

// TestNixShareFlagsRefused: apply, rerun and serve refuse sharing flags
// Nix would misread, before anything runs, as usage errors that say what
// to give.
func TestNixShareFlagsRefused(t *testing.T) {
	state := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"apply", "../../examples/hello.yaml", "--state-dir", state, "--push-cache", "file:///srv/cache"}, "give the secret key"},
		{[]string{"apply", "../../examples/hello.yaml", "--state-dir", state, "--trusted-public-key", "foo"}, "want NAME:BASE64"},
		{[]string{"apply", "../../examples/hello.yaml", "--state-dir", state, "--substituter", "cache.example"}, "want a URL of scheme"},
		{[]string{"apply", "../../examples/hello.yaml", "--state-dir", state, "--max-jobs", "many"}, "a number of jobs"},
		{[]string{"serve", "--state-dir", state, "--signing-key", "/k"}, "without a cache"},
	} {
		code, _, stderr := run(t, tc.args...)
		if code != ExitInvalid || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr, ExitInvalid, tc.want)
		}
	}
}
