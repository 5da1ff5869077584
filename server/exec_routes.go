package server

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// execRoutes registers a sandbox's commands: exec (streamed or in the
// background) and an exec's info, output, signal and wait.
func (s *Server) execRoutes(m sandboxes.Manager) {
	s.stdinRoutes(m)
	s.handle("POST /v1/sandboxes/{id}/exec", func(w *respWriter, r *http.Request) error {
		var req sandboxes.ExecRequest
		if err := s.decode(w, r, &req); err != nil {
			return err
		}
		if req.Background {
			info, err := m.Exec(r.Context(), r.PathValue("id"), req, nil)
			return reply(w, http.StatusAccepted, info, err)
		}
		st := newStream(w, r)
		_, err := m.Exec(r.Context(), r.PathValue("id"), req, st.emit)
		return st.end(err)
	})
	s.handle("GET /v1/sandboxes/{id}/execs/{execId}", func(w *respWriter, r *http.Request) error {
		info, err := m.GetExec(r.Context(), r.PathValue("id"), r.PathValue("execId"))
		return reply(w, http.StatusOK, info, err)
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
}

// SignalRequest is the body of POST .../execs/{execId}/signal.
type SignalRequest struct {
	Signal string `json:"signal"`
}

// offset reads the query parameter name, a byte offset into an exec's
// output; absent is 0.
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
