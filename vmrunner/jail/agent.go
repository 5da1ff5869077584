package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// AgentName is the agent binary's name, and AgentEnv the variable that
// names it instead.
const (
	AgentName = "agentsandbox-guest"
	AgentEnv  = "AGENTSANDBOX_AGENT"
)

// AgentPath is the jail's init when Config.InitPath is empty: the static
// agent, the same binary that is PID 1 in a VM. It is $AGENTSANDBOX_AGENT
// when that is set, else agentsandbox-guest in the directory of this
// process's own executable (bin/ after `make build`, $out/bin of the
// project flake's package). A missing agent is an *AgentError that says
// how to get one.
func AgentPath() (string, error) {
	p := os.Getenv(AgentEnv)
	if p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", &AgentError{Path: p, Err: err}
		}
		p = abs
	} else {
		exe, err := os.Executable()
		if err != nil {
			return "", &AgentError{Path: AgentName, Err: fmt.Errorf("find this executable's directory: %w", err)}
		}
		p = filepath.Join(filepath.Dir(exe), AgentName)
	}
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", &AgentError{Path: p, Err: errors.New("no such file")}
	case err != nil:
		return "", &AgentError{Path: p, Err: err}
	case !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0:
		return "", &AgentError{Path: p, Err: errors.New("not an executable file")}
	}
	return p, nil
}

// AgentError is a jail init that is missing or cannot serve this binary: it
// names the path tried and how to fix it.
type AgentError struct {
	Path string
	Err  error
}

func (e *AgentError) Error() string {
	return fmt.Sprintf("sandbox agent %s: %v; build it from the same source as this agentsandbox (`make build` puts both in bin/), or set %s to its path",
		e.Path, e.Err, AgentEnv)
}

func (e *AgentError) Unwrap() error { return e.Err }
