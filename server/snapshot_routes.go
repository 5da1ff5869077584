package server

import (
	"net/http"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// snapshotRoutes registers a sandbox's snapshots and its restore from
// one.
func (s *Server) snapshotRoutes(m sandboxes.Manager) {
	s.handle("POST /v1/sandboxes/{id}/snapshots", func(w *respWriter, r *http.Request) error {
		var req sandboxes.SnapshotRequest
		if err := s.decode(w, r, &req); err != nil {
			return err
		}
		snap, err := m.Snapshot(r.Context(), r.PathValue("id"), req.Label)
		return reply(w, http.StatusCreated, snap, err)
	})
	s.handle("GET /v1/sandboxes/{id}/snapshots", func(w *respWriter, r *http.Request) error {
		list, err := m.Snapshots(r.Context(), r.PathValue("id"))
		return reply(w, http.StatusOK, SnapshotList{Snapshots: list}, err)
	})
	s.handle("POST /v1/sandboxes/{id}/restore", func(w *respWriter, r *http.Request) error {
		var req sandboxes.RestoreRequest
		if err := s.decode(w, r, &req); err != nil {
			return err
		}
		if req.Snapshot == "" {
			return badRequest("restore: give the snapshot's id, such as {\"snapshot\": \"sha256:...\"}")
		}
		info, err := m.Restore(r.Context(), r.PathValue("id"), req.Snapshot)
		return reply(w, http.StatusOK, info, err)
	})
}

// SnapshotList is the answer of GET /v1/sandboxes/{id}/snapshots.
type SnapshotList struct {
	Snapshots []sandboxes.SnapshotInfo `json:"snapshots"`
}
