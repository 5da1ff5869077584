package server

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

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

func (s *Server) routes() {
	s.handle("GET /openapi.json", func(w *respWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "application/json")
		_, err := w.Write(openAPI)
		return err
	})
	s.handle("GET /v1/health", func(w *respWriter, r *http.Request) error {
		writeJSON(w, http.StatusOK, Health{OK: true, Version: s.o.Version})
		return nil
	})

	m := s.o.Manager
	s.handle("POST /v1/sandboxes", func(w *respWriter, r *http.Request) error {
		var spec sandboxes.Spec
		if err := s.decode(w, r, &spec); err != nil {
			return err
		}
		info, err := m.Create(r.Context(), spec)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, info)
		return nil
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
		if err != nil {
			return err
		}
		if list == nil {
			list = []sandboxes.Info{}
		}
		writeJSON(w, http.StatusOK, SandboxList{Sandboxes: list})
		return nil
	})
	s.handle("GET /v1/sandboxes/{id}", func(w *respWriter, r *http.Request) error {
		info, err := m.Get(r.Context(), r.PathValue("id"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	})
	s.handle("DELETE /v1/sandboxes/{id}", func(w *respWriter, r *http.Request) error {
		info, err := m.Kill(r.Context(), r.PathValue("id"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
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
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	})

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
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	})

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
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
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
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	})

	s.handle("POST /v1/sandboxes/{id}/snapshots", func(w *respWriter, r *http.Request) error {
		var req sandboxes.SnapshotRequest
		if err := s.decode(w, r, &req); err != nil {
			return err
		}
		snap, err := m.Snapshot(r.Context(), r.PathValue("id"), req.Label)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, snap)
		return nil
	})
	s.handle("GET /v1/sandboxes/{id}/snapshots", func(w *respWriter, r *http.Request) error {
		list, err := m.Snapshots(r.Context(), r.PathValue("id"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, SnapshotList{Snapshots: list})
		return nil
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
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	})

	s.handle("POST /v1/sandboxes/{id}/exec", func(w *respWriter, r *http.Request) error {
		var req sandboxes.ExecRequest
		if err := s.decode(w, r, &req); err != nil {
			return err
		}
		if req.Background {
			info, err := m.Exec(r.Context(), r.PathValue("id"), req, nil)
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusAccepted, info)
			return nil
		}
		st := newStream(w, r)
		_, err := m.Exec(r.Context(), r.PathValue("id"), req, st.emit)
		return st.end(err)
	})
	s.handle("GET /v1/sandboxes/{id}/execs/{execId}", func(w *respWriter, r *http.Request) error {
		info, err := m.GetExec(r.Context(), r.PathValue("id"), r.PathValue("execId"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	})
	s.handle("GET /v1/sandboxes/{id}/execs/{execId}/output", func(w *respWriter, r *http.Request) error {
		q := r.URL.Query()
		out, err := offset(q.Get("stdout"), "stdout")
		if err != nil {
			return err
		}
		errOff, err := offset(q.Get("stderr"), "stderr")
		if err != nil {
			return err
		}
		follow, err := flag(q.Get("follow"), "follow")
		if err != nil {
			return err
		}
		st := newStream(w, r)
		err = m.Output(r.Context(), r.PathValue("id"), r.PathValue("execId"), out, errOff, follow, st.emit)
		return st.end(err)
	})
	s.handle("POST /v1/sandboxes/{id}/execs/{execId}/signal", func(w *respWriter, r *http.Request) error {
		var req SignalRequest
		if err := s.decode(w, r, &req); err != nil {
			return err
		}
		if req.Signal == "" {
			return badRequest("signal: name the signal, such as {\"signal\": \"SIGTERM\"}")
		}
		if err := m.Signal(r.Context(), r.PathValue("id"), r.PathValue("execId"), req.Signal); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
	s.handle("POST /v1/sandboxes/{id}/execs/{execId}/wait", func(w *respWriter, r *http.Request) error {
		id, execID := r.PathValue("id"), r.PathValue("execId")
		info, err := m.GetExec(r.Context(), id, execID)
		if err != nil {
			return err
		}
		last := sandboxes.ExecEvent{Type: sandboxes.EventExit, ExecID: execID, Time: time.Now().UTC(), Exit: info.Exit}
		if info.Exit == nil {
			last = sandboxes.ExecEvent{}
			// From past every byte: only the end is waited for.
			err = m.Output(r.Context(), id, execID, math.MaxInt64, math.MaxInt64, true, func(ev sandboxes.ExecEvent) error {
				if ev.Type == sandboxes.EventExit || ev.Type == sandboxes.EventError {
					last = ev
				}
				return nil
			})
			if err != nil {
				return err
			}
			if last.Type == "" {
				return sandboxes.Errorf(sandboxes.CodeInternal, "wait for exec %s: its output ended without an exit", execID)
			}
		}
		writeJSON(w, http.StatusOK, last)
		return nil
	})

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
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	})
	ls := func(w *respWriter, r *http.Request) error {
		p := r.PathValue("path")
		if err := checkPath(p, true); err != nil {
			return err
		}
		list, err := m.ListFiles(r.Context(), r.PathValue("id"), p)
		if err != nil {
			return err
		}
		if list == nil {
			list = []sandboxes.FileInfo{}
		}
		writeJSON(w, http.StatusOK, FileList{Files: list})
		return nil
	}
	s.handle("GET /v1/sandboxes/{id}/ls", ls)
	s.handle("GET /v1/sandboxes/{id}/ls/{path...}", ls)
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

func offset(v, name string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("%s=%q: want a byte offset, a whole number from 0", name, v)
	}
	return n, nil
}

func flag(v, name string) (bool, error) {
	switch v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, badRequest("%s=%q: want 1 or 0", name, v)
}

// stream writes exec events as NDJSON or Server-Sent Events, beginning
// the answer with the first event so that an error before it is still a
// JSON error with its status.
type stream struct {
	w       *respWriter
	sse     bool
	started bool
}

func newStream(w *respWriter, r *http.Request) *stream {
	sse := r.URL.Query().Get("sse") == "1" || strings.Contains(r.Header.Get("Accept"), "text/event-stream")
	return &stream{w: w, sse: sse}
}

func (st *stream) start() {
	st.started = true
	h := st.w.Header()
	if st.sse {
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
	} else {
		h.Set("Content-Type", "application/x-ndjson")
		h.Set("Cache-Control", "no-store")
	}
	h.Set("X-Content-Type-Options", "nosniff")
	st.w.WriteHeader(http.StatusOK)
}

func (st *stream) emit(ev sandboxes.ExecEvent) error {
	if !st.started {
		st.start()
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if st.sse {
		_, err = fmt.Fprintf(st.w, "event: %s\ndata: %s\n\n", ev.Type, b)
	} else {
		_, err = st.w.Write(append(b, '\n'))
	}
	if err != nil {
		return err
	}
	return st.w.Flush()
}

// end finishes the stream: an error before the first event is the
// answer; one after it becomes a last error event.
func (st *stream) end(err error) error {
	if err == nil {
		if !st.started {
			st.start()
		}
		return nil
	}
	if !st.started {
		return err
	}
	st.emit(sandboxes.ExecEvent{Type: sandboxes.EventError, Time: time.Now().UTC(), Error: errorBody(err).Error.Message})
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
