package server

import (
	"net/http"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// runRoutes registers the workflow runs, which a Manager that is also a
// sandboxes.Runner serves.
func (s *Server) runRoutes(m sandboxes.Manager) {
	s.handle("POST /v1/runs", func(w *respWriter, r *http.Request) error {
		var req sandboxes.RunRequest
		if err := s.decode(w, r, &req); err != nil {
			return err
		}
		runner, ok := m.(sandboxes.Runner)
		if !ok {
			return &sandboxes.Error{Code: sandboxes.CodeUnsupport, Message: "this server does not run workflows; use agentsandbox serve, or agentsandbox apply"}
		}
		info, err := runner.Run(r.Context(), req)
		return reply(w, http.StatusOK, info, err)
	})
}
