package engine

import (
	"slices"
	"testing"

	"github.com/agentsandbox/agentsandbox/workflow"
)

// TestJobEnvPinsHostFacts: every job gets a fixed time zone, locale and
// SOURCE_DATE_EPOCH, sorted, and a step's own env wins over the base.
func TestJobEnvPinsHostFacts(t *testing.T) {
	job := jobFor(workflow.Step{Name: "s", Run: "true", Env: map[string]string{"A": "1"}}, "")
	want := []string{
		"A=1", "AGENTSANDBOX_STEP=s", "HOME=/tmp", "LANG=C.UTF-8", "LC_ALL=C.UTF-8",
		"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "SOURCE_DATE_EPOCH=315532800", "TMPDIR=/tmp", "TZ=UTC",
	}
	if !slices.Equal(job.Env, want) {
		t.Errorf("env\n got %q\nwant %q", job.Env, want)
	}
	job = jobFor(workflow.Step{Name: "s", Run: "true", Env: map[string]string{"TZ": "Europe/Paris", "SOURCE_DATE_EPOCH": "1700000000"}}, "/nix/store/x-env")
	for _, kv := range []string{"TZ=Europe/Paris", "SOURCE_DATE_EPOCH=1700000000", "PATH=/nix/store/x-env/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"} {
		if !slices.Contains(job.Env, kv) {
			t.Errorf("env %q lacks %s", job.Env, kv)
		}
	}
}
