package vmfixture

import (
	"context"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Realise is an engine.RealiseFunc that hands out the fixture's runner for
// every step, for tests whose workflow pins a nixpkgs that cannot be
// fetched here: the engine runs the step as it would a realised one.
func (f *Fixture) Realise(_ context.Context, steps []workflow.Step) (map[string]engine.Realised, error) {
	out := make(map[string]engine.Realised, len(steps))
	for _, s := range steps {
		out[s.Name] = engine.Realised{Runner: f.Dir}
	}
	return out, nil
}
