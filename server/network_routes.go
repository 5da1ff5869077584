package server

import (
	"net/http"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// networkRoutes registers a running sandbox's network, which a Manager
// that is also a sandboxes.NetworkManager serves.
func (s *Server) networkRoutes(m sandboxes.Manager) {
	network := func() (sandboxes.NetworkManager, error) {
		if nm, ok := m.(sandboxes.NetworkManager); ok {
			return nm, nil
		}
		return nil, &sandboxes.Error{Code: sandboxes.CodeUnsupport, Message: "this server cannot change a running sandbox's network; create the sandbox with the network.allow it needs"}
	}
	s.handle("GET /v1/sandboxes/{id}/network", func(w *respWriter, r *http.Request) error {
		nm, err := network()
		if err != nil {
			return err
		}
		info, err := nm.Network(r.Context(), r.PathValue("id"))
		return reply(w, http.StatusOK, info, err)
	})
	s.handle("POST /v1/sandboxes/{id}/network", func(w *respWriter, r *http.Request) error {
		var req sandboxes.NetworkUpdate
		if err := s.decode(w, r, &req); err != nil {
			return err
		}
		nm, err := network()
		if err != nil {
			return err
		}
		info, err := nm.UpdateNetwork(r.Context(), r.PathValue("id"), req)
		return reply(w, http.StatusOK, info, err)
	})
}
