package testtier

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// agentPkg is the sandbox agent, every jail's init.
const agentPkg = "github.com/agentsandbox/agentsandbox/cmd/agentsandbox-guest"

// MainWithAgent runs m with the sandbox agent the jails start as their init:
// it builds cmd/agentsandbox-guest static, as it ships, once per test binary
// into a temporary directory and points AGENTSANDBOX_AGENT (which the jail
// and any CLI the tests start read) at it. With AGENTSANDBOX_AGENT already
// set, or without root (no jail can start), it builds nothing. Call it from
// TestMain: os.Exit(testtier.MainWithAgent(m)).
func MainWithAgent(m *testing.M) int {
	if os.Getenv("AGENTSANDBOX_AGENT") != "" || os.Geteuid() != 0 {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "agentsandbox-agent-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "build the sandbox agent: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin, err := BuildAgent(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// TestMain has no t for t.Setenv; the variable is this process's to set
	// before any test runs.
	os.Setenv("AGENTSANDBOX_AGENT", bin)
	return m.Run()
}

// BuildAgent builds the agent with CGO_ENABLED=0 into dir and returns its path.
func BuildAgent(dir string) (string, error) {
	bin := filepath.Join(dir, "agentsandbox-guest")
	cmd := exec.Command("go", "build", "-o", bin, agentPkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the sandbox agent: CGO_ENABLED=0 go build -o %s %s: %w: %s", bin, agentPkg, err, strings.TrimSpace(string(out)))
	}
	return bin, nil
}
