package vmrunner

import (
	"errors"
	"fmt"
	"strings"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/jobfs"
)

// What every backend shares about a step on the host.

// CgroupRoot is the parent of every step's cgroup, in every hierarchy.
const CgroupRoot = "/agentsandbox"

// CgroupPath is the cgroup of one step of one run:
// /agentsandbox/<run>/<step>, with anything but letters, digits, '-' and
// '_' replaced by '_', so a name can never climb out with "..".
func CgroupPath(runID, step string) string {
	return CgroupRoot + "/" + pathPart(runID) + "/" + pathPart(step)
}

func pathPart(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}

// ErrEgressUnsupported is returned for a step that asks for network egress.
var ErrEgressUnsupported = errors.New("network egress is not supported yet: remove network.allow from the step (it would get loopback only)")

// ReadResult reads the agent's result.json from a control directory. The
// bool is false when there is none (or it cannot be decoded): the job's
// status is then a failure, whatever the sandbox's own exit status says.
//
// The sandbox could write anything there, so it is read as the job's: through
// internal/jobfs (a regular file, not through a symlink), at most
// guest.MaxResultSize bytes, and decoded strictly (guest.ParseResult).
func ReadResult(controlDir string) (guest.Result, bool, error) {
	root, err := jobfs.Open(controlDir)
	if err != nil {
		return guest.Result{}, false, fmt.Errorf("read result: %w", err)
	}
	defer root.Close()
	b, err := root.ReadFile(guest.ResultFile, guest.MaxResultSize)
	if err != nil {
		return guest.Result{}, false, fmt.Errorf("read result: %w", err)
	}
	res, err := guest.ParseResult(b)
	if err != nil {
		return guest.Result{}, false, err
	}
	return res, true, nil
}
