package main

import (
	"os"
	"testing"

	"github.com/agentsandbox/agentsandbox/vmrunner/jail"
)

// TestMain repeats main's dispatch: apply tests re-execute this test binary
// as the sandbox init.
func TestMain(m *testing.M) {
	jail.MaybeInit()
	os.Exit(m.Run())
}
