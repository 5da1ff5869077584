package e2b

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server"
)

// Snapshots and forks: the Manager's snapshots of a sandbox's workspace
// (content-addressed trees, ids "sha256:<hex>"), which a create names as
// its templateID to start from one. They are the workspace only: no
// process, memory or environment of the sandbox comes along, and a
// sandbox's snapshots go when it stops unless another running sandbox
// took the same tree (serve's rules, docs/api.md).

// snapshotInfo is E2B's SnapshotInfo.
type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func snapshotOf(si sandboxes.SnapshotInfo) snapshotInfo {
	names := []string{}
	if si.Label != "" {
		names = append(names, si.Label)
	}
	return snapshotInfo{SnapshotID: si.ID, Names: names}
}

// isSnapshotID says whether a templateID names a snapshot.
func isSnapshotID(t string) bool { return strings.HasPrefix(t, "sha256:") }

// createSnapshotRequest is the body of POST /sandboxes/{id}/snapshots.
type createSnapshotRequest struct {
	Name string `json:"name,omitempty"`
}

func (s *Service) createSnapshot(w http.ResponseWriter, r *http.Request) error {
	var req createSnapshotRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	id := r.PathValue("id")
	if _, err := s.running(r, id); err != nil {
		return err
	}
	si, err := s.m.Snapshot(r.Context(), id, req.Name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, "application/json", snapshotOf(si))
	return nil
}

// listSnapshots answers GET /snapshots: the snapshots of sandboxID, or of
// every running sandbox of the caller's, whose label is name (when
// given), each tree once, in pages of limit after nextToken.
func (s *Service) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return badRequest("limit %q: want a whole number from 1", v)
		}
		limit = n
	}
	ids := []string{q.Get("sandboxID")}
	if ids[0] == "" {
		list, err := s.m.List(r.Context(), nil)
		if err != nil {
			return err
		}
		ids = ids[:0]
		for _, info := range list {
			if info.State == sandboxes.StateRunning {
				ids = append(ids, info.ID)
			}
		}
	}
	var all []sandboxes.SnapshotInfo
	for _, id := range ids {
		list, err := s.m.Snapshots(r.Context(), id)
		if err != nil {
			return err
		}
		all = append(all, list...)
	}
	slices.SortFunc(all, func(a, b sandboxes.SnapshotInfo) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	out := []snapshotInfo{}
	seen := map[string]bool{}
	for _, si := range all {
		if seen[si.ID] || (q.Get("name") != "" && si.Label != q.Get("name")) {
			continue
		}
		seen[si.ID] = true
		out = append(out, snapshotOf(si))
	}
	out, err := page(w, q.Get("nextToken"), limit, "snapshot", out, func(si snapshotInfo) string { return si.SnapshotID })
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, "application/json", out)
	return nil
}

// forkRequest is E2B's SandboxForkRequest.
type forkRequest struct {
	Count   *int   `json:"count,omitempty"`
	Timeout *int64 `json:"timeout,omitempty"`
}

// forkResult is E2B's SandboxForkResult: one of the two.
type forkResult struct {
	Sandbox *sandboxAnswer `json:"sandbox,omitempty"`
	Error   *apiError      `json:"error,omitempty"`
}

// maxForks bounds one fork's count.
const maxForks = 16

// forkTimeoutSeconds is E2B's default lifetime of a fork.
const forkTimeoutSeconds = 15

// fork answers POST /sandboxes/{id}/fork: one snapshot of the sandbox's
// workspace, and count new sandboxes of its template started from it,
// each created (and judged, and counted) as a create is.
func (s *Service) fork(w http.ResponseWriter, r *http.Request) error {
	var req forkRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	count, secs := 1, int64(forkTimeoutSeconds)
	if req.Count != nil {
		count = *req.Count
	}
	if req.Timeout != nil {
		secs = *req.Timeout
	}
	if count < 1 || count > maxForks {
		return badRequest("count %d: fork 1 to %d sandboxes at once", count, maxForks)
	}
	if secs < 1 || secs > 1<<31 {
		return badRequest("timeout %d: want the forks' lifetime in seconds, 1 or more", secs)
	}
	id := r.PathValue("id")
	info, err := s.running(r, id)
	if err != nil {
		return err
	}
	template := "base"
	if b := s.box(id); b != nil {
		template = b.template
	}
	si, err := s.m.Snapshot(r.Context(), id, "fork of "+id)
	if err != nil {
		return err
	}
	out := make([]forkResult, 0, count)
	for range count {
		spec := sandboxes.Spec{FromSnapshot: si.ID, Labels: info.Labels,
			TTL: sandboxes.Duration(time.Duration(secs) * time.Second)}
		spec.IdleTimeout = spec.TTL
		if strings.Contains(template, "#") {
			spec.Template = template
		}
		a, err := s.newSandbox(r, spec, template)
		if err != nil {
			status := server.Status(sandboxes.CodeOf(err))
			out = append(out, forkResult{Error: &apiError{Code: status, Message: err.Error()}})
			continue
		}
		out = append(out, forkResult{Sandbox: &a})
	}
	writeJSON(w, http.StatusCreated, "application/json", out)
	return nil
}
