package main

import (
	"os"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// TestMain builds the sandbox agent, every jail's init, for apply's root
// tier, in-process and in the CLI binaries the tests start.
func TestMain(m *testing.M) {
	os.Exit(testtier.MainWithAgent(m))
}
