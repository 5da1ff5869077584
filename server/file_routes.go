package server

import (
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// fileRoutes registers a sandbox's workspace files: put, get, remove,
// stat and list.
func (s *Server) fileRoutes(m sandboxes.Manager) {
	s.handle("PUT /v1/sandboxes/{id}/files/{path...}", s.putFile)
	s.handle("GET /v1/sandboxes/{id}/files/{path...}", s.getFile)
	s.handle("DELETE /v1/sandboxes/{id}/files/{path...}", func(w *respWriter, r *http.Request) error {
		p := r.PathValue("path")
		if err := checkPath(p, false); err != nil {
			return err
		}
		recursive, err := flag(r.URL.Query().Get("recursive"), "recursive")
		if err != nil {
			return err
		}
		if err := m.RemoveFile(r.Context(), r.PathValue("id"), p, recursive); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
	s.handle("GET /v1/sandboxes/{id}/stat/{path...}", func(w *respWriter, r *http.Request) error {
		p := r.PathValue("path")
		if err := checkPath(p, true); err != nil {
			return err
		}
		info, err := m.Stat(r.Context(), r.PathValue("id"), p)
		return reply(w, http.StatusOK, info, err)
	})
	ls := func(w *respWriter, r *http.Request) error {
		p := r.PathValue("path")
		if err := checkPath(p, true); err != nil {
			return err
		}
		list, err := m.ListFiles(r.Context(), r.PathValue("id"), p)
		if list == nil {
			list = []sandboxes.FileInfo{}
		}
		return reply(w, http.StatusOK, FileList{Files: list}, err)
	}
	s.handle("GET /v1/sandboxes/{id}/ls", ls)
	s.handle("GET /v1/sandboxes/{id}/ls/{path...}", ls)
}

// FileList is the answer of GET /v1/sandboxes/{id}/ls.
type FileList struct {
	Files []sandboxes.FileInfo `json:"files"`
}

// checkPath rejects workspace paths that are obviously bad; the manager
// confines the rest.
func checkPath(p string, allowEmpty bool) error {
	switch {
	case p == "" && !allowEmpty:
		return badRequest("empty path: name a file in the workspace after /files/, such as /files/src/main.go")
	case strings.ContainsRune(p, 0):
		return badRequest("path %q contains a NUL byte", p)
	case path.IsAbs(p):
		return badRequest("path %q is absolute: give it relative to the workspace", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return badRequest("path %q leaves the workspace: \"..\" is not allowed", p)
		}
	}
	return nil
}

// capped fails a file body once it passes limit bytes.
type capped struct {
	r     io.Reader
	n     int64
	limit int64
	over  bool
}

func (c *capped) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.limit {
		c.over = true
		return 0, tooLarge(c.limit)
	}
	return n, err
}

func tooLarge(limit int64) error {
	return sandboxes.Errorf(sandboxes.CodeTooLarge, "the file is larger than %d bytes, the most one put takes: split or compress it", limit)
}

func (s *Server) putFile(w *respWriter, r *http.Request) error {
	p := r.PathValue("path")
	if err := checkPath(p, false); err != nil {
		return err
	}
	var mode uint64
	if v := r.URL.Query().Get("mode"); v != "" {
		var err error
		mode, err = strconv.ParseUint(v, 8, 32)
		if err != nil || mode > 0o777 {
			return badRequest("mode=%q: want octal permission bits, such as 0644 or 0755", v)
		}
	}
	limit := s.maxFileBytes()
	if r.ContentLength > limit {
		return tooLarge(limit)
	}
	body := &capped{r: r.Body, limit: limit}
	info, err := s.o.Manager.PutFile(r.Context(), r.PathValue("id"), p, body, uint32(mode))
	if body.over {
		return tooLarge(limit)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

func (s *Server) maxFileBytes() int64 {
	if s.fileLimit > 0 {
		return s.fileLimit
	}
	return sandboxes.MaxFileBytes
}

// lazyBody begins the answer of a file get with its first byte, so that a
// failure before it is still a JSON error.
type lazyBody struct {
	w       *respWriter
	started bool
}

func (l *lazyBody) start() {
	l.started = true
	l.w.Header().Set("Content-Type", "application/octet-stream")
	l.w.Header().Set("Trailer", "X-Agentsandbox-Sha256")
	l.w.WriteHeader(http.StatusOK)
}

func (l *lazyBody) Write(b []byte) (int, error) {
	if !l.started {
		l.start()
	}
	return l.w.Write(b)
}

func (s *Server) getFile(w *respWriter, r *http.Request) error {
	p := r.PathValue("path")
	if err := checkPath(p, false); err != nil {
		return err
	}
	body := &lazyBody{w: w}
	info, err := s.o.Manager.GetFile(r.Context(), r.PathValue("id"), p, body)
	if err != nil {
		if body.started {
			panic(http.ErrAbortHandler) // the client sees a cut answer, not a wrong file
		}
		return err
	}
	if !body.started {
		body.start()
	}
	if info.SHA256 != "" {
		w.Header().Set("X-Agentsandbox-Sha256", info.SHA256)
	}
	return nil
}
