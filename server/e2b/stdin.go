package e2b

import (
	"context"
	"errors"
	"net/http"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// sendInputRequest is process.SendInputRequest.
type sendInputRequest struct {
	Process processSelector `json:"process"`
	Input   processInput    `json:"input"`
}

// processInput is process.ProcessInput: one of stdin or pty bytes
// (base64 in Connect's JSON).
type processInput struct {
	Stdin []byte `json:"stdin,omitempty"`
	PTY   []byte `json:"pty,omitempty"`
}

// closeStdinRequest is process.CloseStdinRequest.
type closeStdinRequest struct {
	Process processSelector `json:"process"`
}

// sendInput is process.Process/SendInput: bytes to the stdin of a
// command started with stdin: true (commands.sendStdin), or typed into
// the pty of one started with a pty (pty.sendInput). The Manager
// judges it; a command that has ended is not found, as in envd.
func (s *Service) sendInput(ctx context.Context, b *box, r *http.Request) (any, error) {
	var req sendInputRequest
	if err := readUnary(r, &req); err != nil {
		return nil, err
	}
	p, err := b.find(req.Process)
	if err != nil {
		return nil, err
	}
	data := req.Input.Stdin
	switch {
	case req.Input.PTY != nil && !p.pty:
		return nil, rpcErrorf(codeFailedPrecondition, "process %d has no pty: send its input as stdin", p.pid)
	case req.Input.PTY != nil:
		data = req.Input.PTY
	case p.pty:
		return nil, rpcErrorf(codeFailedPrecondition, "process %d runs on a pty: send its input as pty", p.pid)
	}
	return struct{}{}, s.stdinError(ctx, b, p, s.m.WriteStdin(ctx, b.id, p.execID, data))
}

// closeStdin is process.Process/CloseStdin (commands.closeStdin).
func (s *Service) closeStdin(ctx context.Context, b *box, r *http.Request) (any, error) {
	var req closeStdinRequest
	if err := readUnary(r, &req); err != nil {
		return nil, err
	}
	p, err := b.find(req.Process)
	if err != nil {
		return nil, err
	}
	return struct{}{}, s.stdinError(ctx, b, p, s.m.CloseStdin(ctx, b.id, p.execID))
}

// stdinError is the Manager's answer as envd gives it: a process that has
// ended is not found; one whose stdin is not open is a failed
// precondition.
func (s *Service) stdinError(ctx context.Context, b *box, p *proc, err error) error {
	if err == nil {
		return nil
	}
	if sandboxes.CodeOf(err) == sandboxes.CodeConflict {
		if x, gerr := s.m.GetExec(ctx, b.id, p.execID); gerr == nil && !x.Running {
			return rpcErrorf(codeNotFound, "process %d has ended", p.pid)
		}
		var e *sandboxes.Error
		if errors.As(err, &e) {
			return rpcErrorf(codeFailedPrecondition, "process %d: %s", p.pid, e.Message)
		}
	}
	return err
}
