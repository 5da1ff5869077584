package e2b

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// ptyMessage is process.PTY: {size: {cols, rows}}.
type ptyMessage struct {
	Size *struct {
		Cols uint32 `json:"cols"`
		Rows uint32 `json:"rows"`
	} `json:"size"`
}

// sizeOf is the Manager's size of a PTY message (nil: none given).
func sizeOf(raw *json.RawMessage) (*sandboxes.PTYSize, error) {
	if raw == nil {
		return nil, nil
	}
	var m ptyMessage
	if err := json.Unmarshal(*raw, &m); err != nil {
		return nil, rpcErrorf(codeInvalidArgument, "pty: %v", err)
	}
	if m.Size == nil {
		return nil, rpcErrorf(codeInvalidArgument, "pty: give its size, {size: {cols, rows}}")
	}
	if m.Size.Cols > sandboxes.MaxPTYSide || m.Size.Rows > sandboxes.MaxPTYSide {
		return nil, rpcErrorf(codeInvalidArgument, "pty size %dx%d: cols and rows must each be from 1 to %d", m.Size.Cols, m.Size.Rows, sandboxes.MaxPTYSide)
	}
	return &sandboxes.PTYSize{Cols: int(m.Size.Cols), Rows: int(m.Size.Rows)}, nil
}

// ptyOf is the pty of a Start (pty.create): the command runs on a pty of
// the sandbox's own, its output sent as pty data.
func ptyOf(req startRequest) (*sandboxes.PTYSize, error) { return sizeOf(req.PTY) }

// updateRequest is process.UpdateRequest.
type updateRequest struct {
	Process processSelector  `json:"process"`
	PTY     *json.RawMessage `json:"pty,omitempty"`
}

// update is process.Process/Update: a pty's new size (pty.resize).
func (s *Service) update(ctx context.Context, b *box, r *http.Request) (any, error) {
	var req updateRequest
	if err := readUnary(r, &req); err != nil {
		return nil, err
	}
	size, err := sizeOf(req.PTY)
	if err != nil {
		return nil, err
	}
	if size == nil {
		return struct{}{}, nil // nothing to update
	}
	p, err := b.find(req.Process)
	if err != nil {
		return nil, err
	}
	return struct{}{}, s.stdinError(ctx, b, p, s.m.ResizePTY(ctx, b.id, p.execID, *size))
}
