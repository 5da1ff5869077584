package e2b

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// filesystem.Filesystem's MakeDir, Move and WatchDir: the Manager's
// MakeDir, Move and WatchDir on workspace paths (files.go).

type moveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

type watchDirRequest struct {
	Path         string `json:"path"`
	Recursive    bool   `json:"recursive"`
	IncludeEntry bool   `json:"includeEntry"`
}

// watchDirResponse is filesystem.WatchDirResponse: one of its fields.
type watchDirResponse struct {
	Start      *struct{}        `json:"start,omitempty"`
	Filesystem *filesystemEvent `json:"filesystem,omitempty"`
	Keepalive  *struct{}        `json:"keepalive,omitempty"`
}

type filesystemEvent struct {
	Name  string     `json:"name"` // relative to the watched directory
	Type  string     `json:"type"`
	Entry *entryInfo `json:"entry,omitempty"`
}

// eventTypes are filesystem.EventType's names of the Manager's types.
var eventTypes = map[string]string{
	"create": "EVENT_TYPE_CREATE",
	"write":  "EVENT_TYPE_WRITE",
	"remove": "EVENT_TYPE_REMOVE",
	"rename": "EVENT_TYPE_RENAME",
	"chmod":  "EVENT_TYPE_CHMOD",
}

// makeDir is filesystem.Filesystem/MakeDir: the directory and its
// parents; one that exists is already_exists, which makeDir() reads as
// false.
func (s *Service) makeDir(ctx context.Context, b *box, r *http.Request) (any, error) {
	var req pathRequest
	if err := readUnary(r, &req); err != nil {
		return nil, err
	}
	rel, err := workspacePath(req.Path)
	if err != nil {
		return nil, err
	}
	if rel == "" {
		return nil, rpcErrorf(codeAlreadyExists, "%s exists: it is the workspace", req.Path)
	}
	fi, err := s.m.MakeDir(ctx, b.id, rel, 0)
	if errors.Is(err, fs.ErrExist) {
		return nil, rpcErrorf(codeAlreadyExists, "%s: %v", req.Path, err)
	}
	if err != nil {
		return nil, err
	}
	return entryResponse{Entry: entryOf(fi)}, nil
}

// move is filesystem.Filesystem/Move (files.rename): within the
// workspace; the destination is never replaced.
func (s *Service) move(ctx context.Context, b *box, r *http.Request) (any, error) {
	var req moveRequest
	if err := readUnary(r, &req); err != nil {
		return nil, err
	}
	from, err := workspacePath(req.Source)
	if err != nil {
		return nil, err
	}
	to, err := workspacePath(req.Destination)
	if err != nil {
		return nil, err
	}
	if from == "" || to == "" {
		return nil, rpcErrorf(codeInvalidArgument, "move %s to %s: the workspace itself cannot be moved or replaced", req.Source, req.Destination)
	}
	fi, err := s.m.Move(ctx, b.id, from, to)
	if errors.Is(err, fs.ErrExist) {
		return nil, rpcErrorf(codeAlreadyExists, "%v", err)
	}
	if err != nil {
		return nil, err
	}
	return entryResponse{Entry: entryOf(fi)}, nil
}

// watchDir is filesystem.Filesystem/WatchDir: start{} once the watch is
// in place, then an event per change (name relative to the watched
// directory), keepalives as the SDK asks, until the client goes or the
// sandbox stops.
func (s *Service) watchDir(w http.ResponseWriter, r *http.Request, b *box) {
	st := newEventStream(w)
	var req watchDirRequest
	if err := readStreamRequest(r, &req); err != nil {
		st.end(err)
		return
	}
	rel, err := workspacePath(req.Path)
	if err != nil {
		st.end(err)
		return
	}
	ctx := r.Context()
	stop, stopped := make(chan struct{}), make(chan struct{})
	started := false
	err = s.m.WatchDir(ctx, b.id, rel, req.Recursive, func() {
		started = true
		if st.write(0, watchDirResponse{Start: &struct{}{}}) != nil {
			close(stopped)
			return
		}
		go func() {
			defer close(stopped)
			watchKeepalives(r, st, stop)
		}()
	}, func(ev sandboxes.FileEvent) error {
		name := strings.TrimPrefix(strings.TrimPrefix(ev.Path, rel), "/")
		if rel == "" {
			name = ev.Path
		}
		fe := &filesystemEvent{Name: name, Type: eventTypes[ev.Type]}
		if req.IncludeEntry && ev.Type != "remove" && ev.Type != "rename" {
			if fi, err := s.m.Stat(ctx, b.id, ev.Path); err == nil {
				e := entryOf(fi)
				fe.Entry = &e
			}
		}
		return st.write(0, watchDirResponse{Filesystem: fe})
	})
	if started {
		close(stop)
		<-stopped
	}
	if ctx.Err() != nil {
		return // the client went
	}
	s.logInternal(r, err)
	// Once started, a conflict is only the sandbox stopping.
	if err != nil && sandboxes.CodeOf(err) == sandboxes.CodeConflict && (started || s.stopped(ctx, b)) {
		s.forget(b.id)
		err = rpcErrorf(codeUnavailable, "sandbox %s is not running", b.id)
	}
	st.end(err)
}

// watchKeepalives sends a keepalive every Keepalive-Ping-Interval
// seconds until stop is closed.
func watchKeepalives(r *http.Request, st *eventStream, stop <-chan struct{}) {
	n, err := strconv.Atoi(r.Header.Get("Keepalive-Ping-Interval"))
	if err != nil || n < 1 {
		return
	}
	t := time.NewTicker(time.Duration(n) * time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if st.write(0, watchDirResponse{Keepalive: &struct{}{}}) != nil {
				return
			}
		}
	}
}
