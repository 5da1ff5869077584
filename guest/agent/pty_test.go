package agent

import (
	"testing"

	"github.com/agentsandbox/agentsandbox/guest"
)

// TestSessionPTYChecks: a size of zero is refused, on exec and on resize,
// and a resize without a size.
func TestSessionPTYChecks(t *testing.T) {
	for name, q := range map[string]guest.SessionRequest{
		"exec 0 cols":      {Op: guest.OpExec, Command: []string{"sh"}, PTY: &guest.PTYSize{Rows: 24}},
		"resize 0 rows":    {Op: guest.OpResize, PTY: &guest.PTYSize{Cols: 80}},
		"resize with none": {Op: guest.OpResize},
	} {
		if err := q.Check(); err == nil {
			t.Errorf("%s: Check took %+v", name, q)
		}
	}
	ok := guest.SessionRequest{Op: guest.OpResize, PTY: &guest.PTYSize{Cols: 80, Rows: 24}}
	if err := ok.Check(); err != nil {
		t.Errorf("a resize to 80x24: %v", err)
	}
}
