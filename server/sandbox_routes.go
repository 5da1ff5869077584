package server

import (
	"net/http"
	"strings"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// sandboxRoutes registers the sandboxes themselves: create, list, get,
// kill and extend.
func (s *Server) sandboxRoutes(m sandboxes.Manager) {
	s.handle("POST /v1/sandboxes", func(w *respWriter, r *http.Request) error {
		var spec sandboxes.Spec
		if err := s.decode(w, r, &spec); err != nil {
			return err
		}
		info, err := m.Create(r.Context(), spec)
		return reply(w, http.StatusCreated, info, err)
	})
	s.handle("GET /v1/sandboxes", func(w *respWriter, r *http.Request) error {
		labels := map[string]string{}
		for _, l := range r.URL.Query()["label"] {
			k, v, ok := strings.Cut(l, "=")
			if !ok || k == "" {
				return badRequest("label %q: want KEY=VALUE, such as label=project=demo", l)
			}
			labels[k] = v
		}
		list, err := m.List(r.Context(), labels)
		if list == nil {
			list = []sandboxes.Info{}
		}
		return reply(w, http.StatusOK, SandboxList{Sandboxes: list}, err)
	})
	s.handle("GET /v1/sandboxes/{id}", func(w *respWriter, r *http.Request) error {
		info, err := m.Get(r.Context(), r.PathValue("id"))
		return reply(w, http.StatusOK, info, err)
	})
	s.handle("DELETE /v1/sandboxes/{id}", func(w *respWriter, r *http.Request) error {
		info, err := m.Kill(r.Context(), r.PathValue("id"))
		return reply(w, http.StatusOK, info, err)
	})
	s.handle("POST /v1/sandboxes/{id}/extend", func(w *respWriter, r *http.Request) error {
		var req ExtendRequest
		if err := s.decode(w, r, &req); err != nil {
			return err
		}
		if req.TTL == 0 && req.IdleTimeout == 0 {
			return badRequest("extend: give ttl, idleTimeout or both, such as {\"ttl\": \"1h\"}")
		}
		info, err := m.Extend(r.Context(), r.PathValue("id"), req.TTL.D(), req.IdleTimeout.D())
		return reply(w, http.StatusOK, info, err)
	})
}

// SandboxList is the answer of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []sandboxes.Info `json:"sandboxes"`
}

// ExtendRequest is the body of POST /v1/sandboxes/{id}/extend; a zero
// field leaves that limit as it is.
type ExtendRequest struct {
	TTL         sandboxes.Duration `json:"ttl,omitempty"`
	IdleTimeout sandboxes.Duration `json:"idleTimeout,omitempty"`
}
