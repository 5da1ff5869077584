package server

import (
	"net/http"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// handle registers a route; the tests compare the patterns with the
// OpenAPI document.
func (s *Server) handle(pattern string, h func(w *respWriter, r *http.Request) error) {
	s.patterns = append(s.patterns, pattern)
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		rw := w.(*muxWriter).respWriter
		if err := h(rw, r); err != nil {
			if rw.wrote {
				s.o.Logf("%s %s: after the answer began: %v", r.Method, r.URL.Path, err)
				return
			}
			if sandboxes.CodeOf(err) == sandboxes.CodeInternal {
				s.o.Logf("%s %s: %v", r.Method, r.URL.Path, err)
			}
			writeError(rw, err)
		}
	})
}

// reply is a route's answer: err if there is one, else v as JSON with
// status.
func reply(w *respWriter, status int, v any, err error) error {
	if err != nil {
		return err
	}
	writeJSON(w, status, v)
	return nil
}

// routes registers the API's routes, one resource after another, each
// by the register function in its resource's file (sandbox_routes.go,
// exec_routes.go, ...); Options.Extra come after them (extra.go). The
// order is the route table of testdata/routes.golden.
func (s *Server) routes() {
	m := s.o.Manager
	s.serviceRoutes()
	s.sandboxRoutes(m)
	s.runRoutes(m)
	s.networkRoutes(m)
	s.snapshotRoutes(m)
	s.execRoutes(m)
	s.fileRoutes(m)
}

// public routes take no part in the per-identity limit.
var public = map[string]bool{"GET /openapi.json": true, "GET /v1/health": true}

// serviceRoutes registers what describes the server itself: the OpenAPI
// document and the health check, both public.
func (s *Server) serviceRoutes() {
	s.handle("GET /openapi.json", func(w *respWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "application/json")
		_, err := w.Write(openAPI)
		return err
	})
	s.handle("GET /v1/health", func(w *respWriter, r *http.Request) error {
		writeJSON(w, http.StatusOK, Health{OK: true, Version: s.o.Version})
		return nil
	})
}

// Health is the answer of GET /v1/health.
type Health struct {
	OK      bool   `json:"ok"`
	Version string `json:"version"`
}

// flag reads the query parameter name, whose value v is 1 or 0 (true or
// false); absent is 0.
func flag(v, name string) (bool, error) {
	switch v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, badRequest("%s=%q: want 1 or 0", name, v)
}
