package server

import (
	"errors"
	"io"
	"net/http"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// stdinRoutes registers writes to the open stdin of an exec started with
// stdinOpen or a pty: the body's bytes, as they are, then its close; and
// a pty's resize.
func (s *Server) stdinRoutes(m sandboxes.Manager) {
	s.handle("POST /v1/sandboxes/{id}/execs/{execId}/stdin", func(w *respWriter, r *http.Request) error {
		data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, sandboxes.MaxStdinWrite))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			return sandboxes.Errorf(sandboxes.CodeTooLarge, "stdin: the body is over %d bytes, the most in one write; write it in pieces", sandboxes.MaxStdinWrite)
		case err != nil:
			return sandboxes.Errorf(sandboxes.CodeBadRequest, "stdin: read the body: %v", err)
		}
		if err := m.WriteStdin(r.Context(), r.PathValue("id"), r.PathValue("execId"), data); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
	s.handle("POST /v1/sandboxes/{id}/execs/{execId}/pty", func(w *respWriter, r *http.Request) error {
		var size sandboxes.PTYSize
		if err := s.decode(w, r, &size); err != nil {
			return err
		}
		if err := m.ResizePTY(r.Context(), r.PathValue("id"), r.PathValue("execId"), size); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
	s.handle("POST /v1/sandboxes/{id}/execs/{execId}/stdin/close", func(w *respWriter, r *http.Request) error {
		if err := m.CloseStdin(r.Context(), r.PathValue("id"), r.PathValue("execId")); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}
