package namespace

import (
	"os"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/runnertest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// TestMain builds the sandbox agent the jails start as init.
func TestMain(m *testing.M) {
	os.Exit(testtier.MainWithAgent(m))
}

// newBackend returns a backend whose state and jail dirs are the test's.
func newBackend(t *testing.T) vmrunner.Backend {
	return New(Options{StateDir: t.TempDir(), JailDir: t.TempDir()})
}

var suiteOpts = runnertest.Options{
	Isolated:  true,
	Isolation: workflow.IsolationNamespace,
	Setup:     func(t *testing.T) { testtier.Root(t) },
}

func TestConformance(t *testing.T) {
	runnertest.Run(t, newBackend, suiteOpts)
}

func TestSessionConformance(t *testing.T) {
	runnertest.RunSessions(t, newBackend, suiteOpts)
}
