package sandboxes

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
)

// Warm specs that make no sandbox are refused when the manager starts,
// before it opens anything.
func TestWarmSpecsChecked(t *testing.T) {
	store, err := record.OpenStore(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(context.Background(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, ws := range map[string][]WarmSpec{
		"no such template": {{Spec: Spec{Template: "nope.yaml#x"}, N: 1}},
		"zero":             {{N: 0}},
		"over the limit":   {{N: 20}, {Spec: Spec{Env: map[string]string{"A": "1"}}, N: 20}},
		"a bad spec":       {{Spec: Spec{Resources: map[string]any{"memory": "lots"}}, N: 1}},
	} {
		m, err := New(Options{Engine: engine.Options{Store: store, Policy: pol}, TemplateDir: t.TempDir(), Warm: ws})
		if err == nil {
			m.Close(context.Background())
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "warm pool") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
