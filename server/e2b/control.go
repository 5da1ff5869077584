package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server"
)

// E2B's control API (docs/e2b.md): sandboxes created, listed, described,
// given a new timeout and killed, each by the Manager as the caller the
// server authenticated (X-API-Key is an identity's token). Errors are
// E2B's {code, message}, code the HTTP status.

// apiError is an error of the control API.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// maxControlBody bounds a control API request's JSON.
const maxControlBody = 1 << 20

func (s *Service) controlHandler() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h func(w http.ResponseWriter, r *http.Request) error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := h(w, r); err != nil {
				s.logInternal(r, err)
				writeControlError(w, err)
			}
		})
	}
	handle("POST /v2/sandboxes", s.create)
	handle("GET /v2/sandboxes", s.list)
	handle("GET /sandboxes/{id}", s.getInfo)
	handle("DELETE /sandboxes/{id}", s.kill)
	handle("POST /sandboxes/{id}/timeout", s.setTimeout)
	handle("POST /v2/sandboxes/{id}/connect", s.connect)
	handle("POST /sandboxes/{id}/snapshots", s.createSnapshot)
	handle("GET /snapshots", s.listSnapshots)
	handle("POST /sandboxes/{id}/fork", s.fork)
	handle("PUT /sandboxes/{id}/network", s.updateNetwork)
	for _, p := range notBuilt {
		handle(p.pattern, func(w http.ResponseWriter, r *http.Request) error {
			return &sandboxes.Error{Code: sandboxes.CodeUnsupport, Message: fmt.Sprintf("%s %s (%s) is not built yet in agentsandbox's E2B transport: docs/e2b.md lists what is", r.Method, r.URL.Path, p.what)}
		})
	}
	handle("/", func(w http.ResponseWriter, r *http.Request) error {
		return sandboxes.Errorf(sandboxes.CodeNotFound, "no E2B control API route %s %s (docs/e2b.md lists them)", r.Method, r.URL.Path)
	})
	return mux
}

// notBuilt are the routes of E2B's control API this server does not
// offer yet: they answer 501.
var notBuilt = []struct{ pattern, what string }{
	{"GET /sandboxes", "the v1 list; the SDK lists with GET /v2/sandboxes"},
	{"POST /sandboxes", "the v1 create; the SDK creates with POST /v2/sandboxes"},
	{"POST /sandboxes/{id}/connect", "Sandbox.connect"},
	{"POST /sandboxes/{id}/resume", "resume"},
	{"POST /sandboxes/{id}/pause", "sandbox.pause"},
	{"GET /sandboxes/{id}/metrics", "sandbox.getMetrics"},
	{"GET /sandboxes/metrics", "metrics"},
	{"GET /sandboxes/{id}/logs", "logs"},
	{"GET /v2/sandboxes/{id}/logs", "logs"},
	{"POST /sandboxes/{id}/refreshes", "refresh"},
	{"DELETE /templates/{id}", "Sandbox.deleteSnapshot (a sandbox's snapshots go when it stops)"},
}

// writeControlError answers err as E2B's {code, message}.
func writeControlError(w http.ResponseWriter, err error) {
	status := server.Status(sandboxes.CodeOf(err))
	msg := err.Error()
	var e *sandboxes.Error
	if errors.As(err, &e) && e.Decision != "" {
		msg += " (policy decision " + e.Decision + ")"
	}
	writeJSON(w, status, "application/json", apiError{Code: status, Message: msg})
}

func badRequest(format string, a ...any) error {
	return sandboxes.Errorf(sandboxes.CodeBadRequest, format, a...)
}

// decodeBody reads a control API request's JSON into v; an empty body
// leaves v as it is. Unknown fields are refused: a field this server does
// not act on must not be dropped silently.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxControlBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && err != io.EOF {
		return badRequest("request body: %v (E2B's %T; docs/e2b.md says which fields this server takes)", err, v)
	}
	return nil
}

// newSandbox is E2B's NewSandboxV2, the fields this server takes. The
// others (autoPause, mcp, volumeMounts, ...) are refused by
// decodeBody.
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout,omitempty"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	EnvVars             map[string]string `json:"envVars,omitempty"`
	AllowInternetAccess *bool             `json:"allow_internet_access,omitempty"`
	Secure              *bool             `json:"secure,omitempty"`
	Network             *sandboxNetwork   `json:"network,omitempty"`
}

// sandboxAnswer is E2B's Sandbox, the answer of a create.
type sandboxAnswer struct {
	SandboxID       string  `json:"sandboxID"`
	TemplateID      string  `json:"templateID"`
	ClientID        string  `json:"clientID"`
	EnvdVersion     string  `json:"envdVersion"`
	EnvdAccessToken string  `json:"envdAccessToken,omitempty"`
	Domain          *string `json:"domain"`
}

// listedSandbox is E2B's ListedSandbox; sandboxDetail its SandboxDetail.
type listedSandbox struct {
	SandboxID   string            `json:"sandboxID"`
	TemplateID  string            `json:"templateID"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	State       string            `json:"state"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int64             `json:"memoryMB"`
	DiskSizeMB  int64             `json:"diskSizeMB"`
	EnvdVersion string            `json:"envdVersion"`
	Metadata    map[string]string `json:"metadata"`
}

type sandboxDetail struct {
	listedSandbox
	AllowInternetAccess bool    `json:"allowInternetAccess"`
	Domain              *string `json:"domain"`
}

// clientID is E2B's deprecated field, required by its schema.
const clientID = "agentsandbox"

// spec is the Manager's spec of a create: template "base" is the
// default spec, "FILE#STEP" a workflow step of serve --templates.
func (n newSandbox) spec() (sandboxes.Spec, error) {
	var spec sandboxes.Spec
	switch t := n.TemplateID; {
	case t == "" || t == "base":
	case strings.Contains(t, "#"):
		spec.Template = t
	case isSnapshotID(t):
		spec.FromSnapshot = t
	default:
		return spec, badRequest("templateID %q: this server has template \"base\" (the default sandbox), the workflow steps of serve --templates, named FILE#STEP, and snapshots, sha256:<hex> (docs/e2b.md)", t)
	}
	if err := n.network(&spec); err != nil {
		return spec, err
	}
	secs := int64(DefaultTimeoutSeconds)
	if n.Timeout != nil {
		secs = *n.Timeout
	}
	if secs < 1 || secs > 1<<31 {
		return spec, badRequest("timeout %d: want the sandbox's lifetime in seconds, 1 or more", secs)
	}
	// E2B has no idle timeout: a sandbox lives its timeout out.
	spec.TTL = sandboxes.Duration(time.Duration(secs) * time.Second)
	spec.IdleTimeout = spec.TTL
	spec.Env = n.EnvVars
	spec.Labels = n.Metadata
	return spec, nil
}

// connectRequest is the body of POST /v2/sandboxes/{id}/connect.
type connectRequest struct {
	Timeout *int64 `json:"timeout,omitempty"`
	Memory  *bool  `json:"memory,omitempty"`
}

// connect answers Sandbox.connect: a running sandbox of the caller's,
// whose lifetime is extended to timeout seconds from now (E2B's 300 when
// none) if it would end sooner, never shortened. A sandbox made through
// another transport gets its envd access token now, acting for the
// caller. Nothing is paused on this server, so nothing is resumed
// (memory is moot).
func (s *Service) connect(w http.ResponseWriter, r *http.Request) error {
	var req connectRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	secs := int64(DefaultTimeoutSeconds)
	if req.Timeout != nil {
		secs = *req.Timeout
	}
	if secs < 1 || secs > 1<<31 {
		return badRequest("timeout %d: want seconds from now, 1 or more", secs)
	}
	id := r.PathValue("id")
	info, err := s.running(r, id)
	if err != nil {
		return err
	}
	if d := time.Duration(secs) * time.Second; time.Now().Add(d).After(info.ExpiresAt) {
		if _, err := s.m.Extend(r.Context(), id, d, d); err != nil {
			return err
		}
	}
	s.mu.Lock()
	b := s.boxes[id]
	if b == nil {
		token, err := newToken()
		if err != nil {
			s.mu.Unlock()
			return fmt.Errorf("make the sandbox's envd access token: %w", err)
		}
		owner, _ := sandboxes.IdentityFrom(r.Context())
		b = &box{id: id, token: token, owner: owner, template: "base", procs: map[uint32]*proc{}}
		s.boxes[id] = b
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, "application/json", sandboxAnswer{SandboxID: id, TemplateID: b.template, ClientID: clientID,
		EnvdVersion: EnvdVersion, EnvdAccessToken: b.token})
	return nil
}

func (s *Service) create(w http.ResponseWriter, r *http.Request) error {
	var req newSandbox
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	spec, err := req.spec()
	if err != nil {
		return err
	}
	template := req.TemplateID
	if template == "" {
		template = "base"
	}
	a, err := s.newSandbox(r, spec, template)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, "application/json", a)
	return nil
}

// newSandbox creates a sandbox of spec for the caller, with its envd
// access token.
func (s *Service) newSandbox(r *http.Request, spec sandboxes.Spec, template string) (sandboxAnswer, error) {
	token, err := newToken()
	if err != nil {
		return sandboxAnswer{}, fmt.Errorf("make the sandbox's envd access token: %w", err)
	}
	info, err := s.m.Create(r.Context(), spec)
	if err != nil {
		return sandboxAnswer{}, err
	}
	s.sweep(r.Context())
	owner, _ := sandboxes.IdentityFrom(r.Context())
	s.mu.Lock()
	s.boxes[info.ID] = &box{id: info.ID, token: token, owner: owner, template: template, procs: map[uint32]*proc{}}
	s.mu.Unlock()
	return sandboxAnswer{SandboxID: info.ID, TemplateID: template, ClientID: clientID, EnvdVersion: EnvdVersion, EnvdAccessToken: token}, nil
}

// listed is a Manager sandbox as E2B lists it.
func (s *Service) listed(info sandboxes.Info) listedSandbox {
	template := "base"
	if b := s.box(info.ID); b != nil {
		template = b.template
	}
	var step struct {
		Resources struct {
			VCPU   int   `json:"vcpu"`
			Memory int64 `json:"memory"`
			Disk   int64 `json:"disk"`
		} `json:"resources"`
	}
	if raw, err := json.Marshal(info.Step); err == nil {
		json.Unmarshal(raw, &step)
	}
	labels := info.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	return listedSandbox{SandboxID: info.ID, TemplateID: template, ClientID: clientID, StartedAt: info.Created, EndAt: info.ExpiresAt,
		State: "running", CPUCount: step.Resources.VCPU, MemoryMB: step.Resources.Memory >> 20, DiskSizeMB: step.Resources.Disk >> 20,
		EnvdVersion: EnvdVersion, Metadata: labels}
}

// running is the Manager's sandbox id, not found once it is stopped (an
// E2B sandbox that is killed is gone).
func (s *Service) running(r *http.Request, id string) (sandboxes.Info, error) {
	info, err := s.m.Get(r.Context(), id)
	if err == nil && info.State != sandboxes.StateRunning {
		s.forget(id)
		err = sandboxes.Errorf(sandboxes.CodeNotFound, "sandbox %s has stopped (%s)", id, info.Ended)
	}
	if sandboxes.CodeOf(err) == sandboxes.CodeNotFound {
		return info, sandboxes.Errorf(sandboxes.CodeNotFound, "sandbox %q not found: %v", id, err)
	}
	return info, err
}

func (s *Service) getInfo(w http.ResponseWriter, r *http.Request) error {
	info, err := s.running(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, "application/json", sandboxDetail{listedSandbox: s.listed(info)})
	return nil
}

func (s *Service) kill(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if _, err := s.running(r, id); err != nil {
		return err
	}
	if _, err := s.m.Kill(r.Context(), id); err != nil {
		return err
	}
	s.forget(id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// timeoutRequest is the body of POST /sandboxes/{id}/timeout.
type timeoutRequest struct {
	Timeout int64 `json:"timeout"`
}

func (s *Service) setTimeout(w http.ResponseWriter, r *http.Request) error {
	var req timeoutRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if req.Timeout < 1 || req.Timeout > 1<<31 {
		return badRequest("timeout %d: want seconds from now, 1 or more", req.Timeout)
	}
	id := r.PathValue("id")
	if _, err := s.running(r, id); err != nil {
		return err
	}
	d := time.Duration(req.Timeout) * time.Second
	if _, err := s.m.Extend(r.Context(), id, d, d); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// list answers GET /v2/sandboxes: the caller's running sandboxes (E2B's
// states running and paused; this server has no paused ones) whose
// labels include every metadata filter, started after startedAfter, of
// template, oldest first (order=desc: newest), in pages of limit after
// nextToken (the id that ended the page before).
func (s *Service) list(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	labels := map[string]string{}
	if v := q.Get("metadata"); v != "" {
		kv, err := url.ParseQuery(v)
		if err != nil {
			return badRequest("metadata %q: want URL-encoded key=value pairs joined by &: %v", v, err)
		}
		for k, vs := range kv {
			labels[k] = vs[len(vs)-1]
		}
	}
	wantRunning := true
	if v := q.Get("state"); v != "" {
		wantRunning = false
		for _, st := range strings.Split(v, ",") {
			switch st {
			case "running":
				wantRunning = true
			case "paused":
			default:
				return badRequest("state %q: want running, paused or both", st)
			}
		}
	}
	var after time.Time
	if v := q.Get("startedAfter"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return badRequest("startedAfter %q: want an RFC 3339 time, such as 2026-01-02T15:04:05Z", v)
		}
		after = t
	}
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return badRequest("limit %q: want a whole number from 1", v)
		}
		limit = n
	}
	list, err := s.m.List(r.Context(), labels)
	if err != nil {
		return err
	}
	out := []listedSandbox{}
	if wantRunning {
		for _, info := range list {
			l := s.listed(info)
			if info.State == sandboxes.StateRunning && l.StartedAt.After(after) && (q.Get("template") == "" || q.Get("template") == l.TemplateID) {
				out = append(out, l)
			}
		}
	}
	slices.SortFunc(out, func(a, b listedSandbox) int {
		if c := a.StartedAt.Compare(b.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(a.SandboxID, b.SandboxID)
	})
	if q.Get("order") == "desc" {
		slices.Reverse(out)
	}
	out, err = page(w, q.Get("nextToken"), limit, "sandbox", out, func(l listedSandbox) string { return l.SandboxID })
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, "application/json", out)
	return nil
}

// page is one page of a listing in E2B's paging: the items after the one
// whose id is nextToken, at most limit of them (all when limit is 0), with
// X-Next-Token set to the last one's id when more follow.
func page[T any](w http.ResponseWriter, nextToken string, limit int, what string, items []T, id func(T) string) ([]T, error) {
	if nextToken != "" {
		i := slices.IndexFunc(items, func(t T) bool { return id(t) == nextToken })
		if i < 0 {
			return nil, badRequest("nextToken %q: no such %s in this listing any more; list again from the start", nextToken, what)
		}
		items = items[i+1:]
	}
	if limit > 0 && len(items) > limit {
		items = items[:limit]
		w.Header().Set("X-Next-Token", id(items[limit-1]))
	}
	return items, nil
}

// sweep forgets the sandboxes that have stopped (expired, or killed
// through another transport) since they were created: each create
// looks, so what is kept is bounded by the sandboxes running.
func (s *Service) sweep(ctx context.Context) {
	s.mu.Lock()
	boxes := make([]*box, 0, len(s.boxes))
	for _, b := range s.boxes {
		boxes = append(boxes, b)
	}
	s.mu.Unlock()
	for _, b := range boxes {
		s.stopped(sandboxes.WithIdentity(ctx, b.owner), b)
	}
}
