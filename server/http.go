package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// ErrorBody is every error answer: {"error": {...}}.
type ErrorBody struct {
	Error sandboxes.Error `json:"error"`
}

// Status is the HTTP status of an error code.
func Status(c sandboxes.Code) int {
	switch c {
	case sandboxes.CodeBadRequest:
		return http.StatusBadRequest
	case sandboxes.CodeAuth:
		return http.StatusUnauthorized
	case sandboxes.CodeDenied:
		return http.StatusForbidden
	case sandboxes.CodeNotFound:
		return http.StatusNotFound
	case sandboxes.CodeConflict:
		return http.StatusConflict
	case sandboxes.CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case sandboxes.CodeLimit:
		return http.StatusTooManyRequests
	case sandboxes.CodeUnsupport:
		return http.StatusNotImplemented
	case sandboxes.CodeStopped:
		return http.StatusServiceUnavailable
	case sandboxes.CodeTimeout:
		return http.StatusRequestTimeout
	}
	return http.StatusInternalServerError
}

// errorBody is err as an answer: an *Error as it is, any other error as
// an internal one.
func errorBody(err error) ErrorBody {
	var e *sandboxes.Error
	if errors.As(err, &e) {
		return ErrorBody{Error: sandboxes.Error{Code: e.Code, Message: e.Message, Decision: e.Decision}}
	}
	return ErrorBody{Error: sandboxes.Error{Code: sandboxes.CodeInternal, Message: err.Error()}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	b := errorBody(err)
	if b.Error.Code == sandboxes.CodeTimeout {
		w.Header().Set("Connection", "close") // the rest of the body is not waited for
	}
	writeJSON(w, Status(b.Error.Code), b)
}

func badRequest(format string, a ...any) error {
	return sandboxes.Errorf(sandboxes.CodeBadRequest, format, a...)
}

// decode reads a JSON body of at most MaxBodyBytes into v, strictly: an
// unknown field or trailing data is an error. An empty body leaves v as
// it is.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	what := fmt.Sprintf("%T", v)
	what = what[strings.LastIndex(what, ".")+1:]
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.o.MaxBodyBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == io.EOF {
		return nil
	}
	if err == nil {
		if err = dec.Decode(&json.RawMessage{}); err == io.EOF {
			return nil
		}
		if err == nil {
			return badRequest("request body: more than one JSON value; send one %s object", what)
		}
	}
	var (
		mbe  *http.MaxBytesError
		syn  *json.SyntaxError
		typ  *json.UnmarshalTypeError
		serr *sandboxes.Error
	)
	switch {
	case errors.As(err, &mbe):
		return sandboxes.Errorf(sandboxes.CodeTooLarge, "request body: larger than %d bytes, the most this server takes for JSON", mbe.Limit)
	case errors.As(err, &syn):
		return badRequest("request body: not valid JSON at byte %d (%v); send one %s object", syn.Offset, syn, what)
	case errors.As(err, &typ):
		return badRequest("request body: field %q of %s: want a JSON %s, got %s", typ.Field, what, jsonKind(typ.Type.Kind().String()), typ.Value)
	case errors.As(err, &serr):
		return err
	case err == io.ErrUnexpectedEOF:
		return badRequest("request body: the JSON ends too early; send one complete %s object", what)
	}
	return badRequest("request body: %v (a %s object; see GET /openapi.json)", err, what)
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "slice", "array":
		return "array"
	case "map", "struct", "ptr":
		return "object"
	case "bool":
		return "boolean"
	}
	return "number"
}

// respWriter remembers whether the answer has begun, so that a failure
// after that does not try to write an error status.
type respWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *respWriter) WriteHeader(code int) {
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *respWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *respWriter) Flush() error {
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *respWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// muxWriter answers in JSON what the mux itself would answer in text:
// no route (404), a method not allowed (405) and its redirects to a
// canonical path. The routes' own answers set their Content-Type first.
type muxWriter struct {
	*respWriter
	r        *http.Request
	replaced bool
}

func (w *muxWriter) WriteHeader(code int) {
	if w.replaced {
		return
	}
	h := w.Header()
	if h.Get("Content-Type") == "application/json" || (code != http.StatusNotFound && code != http.StatusMethodNotAllowed && (code < 300 || code > 399)) {
		w.respWriter.WriteHeader(code)
		return
	}
	w.replaced = true
	loc := h.Get("Location")
	for _, k := range []string{"Location", "Content-Type", "X-Content-Type-Options"} {
		h.Del(k)
	}
	m, p := w.r.Method, w.r.URL.Path
	switch {
	case code == http.StatusMethodNotAllowed:
		writeJSON(w.respWriter, code, ErrorBody{Error: sandboxes.Error{Code: sandboxes.CodeBadRequest,
			Message: fmt.Sprintf("method %s is not allowed on %s: use %s", m, p, h.Get("Allow"))}})
	case loc != "":
		writeError(w.respWriter, sandboxes.Errorf(sandboxes.CodeNotFound, "no route %s %s: did you mean %s? (the routes are in GET /openapi.json)", m, p, loc))
	default:
		writeError(w.respWriter, sandboxes.Errorf(sandboxes.CodeNotFound, "no route %s %s: the routes are in GET /openapi.json", m, p))
	}
}

func (w *muxWriter) Write(b []byte) (int, error) {
	if !w.respWriter.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.replaced {
		return len(b), nil
	}
	return w.respWriter.Write(b)
}

// uncleanPath says whether an URL path has empty, "." or ".." segments
// (which the mux would answer with a redirect).
func uncleanPath(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return true
	}
	segs := strings.Split(p[1:], "/")
	for i, seg := range segs {
		if seg == "." || seg == ".." || (seg == "" && i != len(segs)-1) {
			return true
		}
	}
	return false
}

// serve is the server's handler: recovery, drain accounting,
// authentication (the identity goes on the request's context), the
// per-identity limit of requests in flight and JSON answers for what the
// mux would answer in text.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	rw := &respWriter{ResponseWriter: w}
	t := s.transportFor(r) // nil: the API's (transport.go)
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler {
			panic(v)
		}
		s.o.Logf("panic serving %s %s: %v\n%s", r.Method, r.URL.Path, v, debug.Stack())
		if rw.wrote {
			panic(http.ErrAbortHandler) // cut the answer short: the client sees it is incomplete
		}
		s.fail(t, rw, r, sandboxes.Errorf(sandboxes.CodeInternal, "the server failed on %s %s (a bug: report it with the server's log)", r.Method, r.URL.Path))
	}()
	if !s.enter() {
		s.fail(t, rw, r, sandboxes.Errorf(sandboxes.CodeStopped, "the server is shutting down: retry against a new server"))
		return
	}
	defer s.leave()
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = s.bodyTimer(w, r.Body)
	}
	id, anon, err := s.authenticateFor(t, r)
	if err != nil {
		// A client without the token keeps no connection open.
		rw.Header().Set("Connection", "close")
		rw.Header().Set("WWW-Authenticate", `Bearer realm="agentsandbox"`)
		s.fail(t, rw, r, err)
		return
	}
	// The Manager (and MCP's tools) act for the identity: what is
	// another's is not found.
	if !anon {
		r = r.WithContext(sandboxes.WithIdentity(r.Context(), id.Identity))
	}
	// A caller's W3C trace context (the traceparent header) makes the
	// request's spans part of its trace; with tracing off the propagator
	// does nothing.
	r = r.WithContext(otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
	if uncleanPath(r.URL.Path) {
		s.fail(t, rw, r, badRequest("path %q has an empty, \".\" or \"..\" segment: send a canonical path; workspace paths are relative and stay in the workspace", r.URL.Path))
		return
	}
	pattern := "" // a transport's request is not public by its pattern
	if t == nil {
		_, pattern = s.mux.Handler(r)
	}
	if !anon && !public[pattern] {
		if !s.acquire(id) {
			s.fail(t, rw, r, sandboxes.Errorf(sandboxes.CodeLimit, "%d requests of identity %s are in flight, its limit (max_in_flight): wait for one to finish", s.maxInFlight(id), id.Name))
			return
		}
		defer s.release(id.Name)
	}
	if t != nil {
		t.Handler.ServeHTTP(rw, r)
		return
	}
	s.mux.ServeHTTP(&muxWriter{respWriter: rw, r: r}, r)
}

// bodyTimer bounds the waits for a request's body: each read of it (and
// the wait for its first byte) may take at most BodyTimeout, so a client
// that stops sending is answered 408 and its connection closed instead of
// holding its per-client slot and the connection for ever. Once the body
// has ended the connection has no read deadline again (the server's
// watch for the client going away must not time out during a stream).
func (s *Server) bodyTimer(w http.ResponseWriter, body io.ReadCloser) io.ReadCloser {
	t := &timedBody{ReadCloser: body, rc: http.NewResponseController(w), timeout: s.o.BodyTimeout}
	t.rc.SetReadDeadline(time.Now().Add(t.timeout))
	return t
}

type timedBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	ended   bool
}

func (t *timedBody) Read(p []byte) (int, error) {
	if t.ended {
		return t.ReadCloser.Read(p)
	}
	t.rc.SetReadDeadline(time.Now().Add(t.timeout))
	n, err := t.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		t.ended = true
		t.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		return n, &sandboxes.Error{Code: sandboxes.CodeTimeout, Err: err,
			Message: fmt.Sprintf("request body: nothing arrived for %s, the most this server waits: send the body without pausing", t.timeout)}
	}
	return n, err
}
