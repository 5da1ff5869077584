package namespace

import (
	"context"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/vmrunner"
)

// The namespace backend holds sessions for the engine (engine.OpenSandbox,
// through vmrunner.SessionBackend).
var _ vmrunner.SessionBackend = (*Backend)(nil)

// OpenSession is Open behind the vmrunner.Session interface.
func (b *Backend) OpenSession(ctx context.Context, spec vmrunner.StepSpec) (vmrunner.Session, error) {
	s, err := b.Open(ctx, spec)
	if err != nil {
		return nil, err
	}
	return session{s}, nil
}

type session struct{ *Session }

func (s session) Exec(ctx context.Context, q guest.SessionRequest) (vmrunner.SessionExec, error) {
	x, err := s.Session.Exec(ctx, q)
	if err != nil {
		return nil, err
	}
	return x, nil
}
