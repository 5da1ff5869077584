// Package fakesandboxes is an in-memory sandboxes.Manager FOR TESTS ONLY.
//
// IT ISOLATES NOTHING. Its "sandboxes" are temporary directories on the
// host and its execs are plain os/exec processes run as the calling user,
// with the host's PATH, files and network. It exists so that the API
// surface (package server, the Python and JS clients, the MCP server, the
// sandbox CLI commands) can be tested against a real HTTP server without
// root, KVM or Nix. Never serve it to anything but a test.
//
// What it does honour is the contract of sandboxes.Manager: ids, labels,
// lifetimes (TTL and idle timeout, checked lazily), foreground execs with
// ordered events (the command waits for its reader, as the real one does),
// background execs with kept output read from offsets (the first LogLimit
// bytes of each stream in a file, the newest in memory, a gap event for
// the rest),
// signals to the exec's process group, timeouts, files confined to the
// sandbox's directory with os.Root, ownership by the caller's identity
// (sandboxes.WithIdentity: another identity's sandbox or snapshot is
// not_found, an admin sees all, a context without one is the operator,
// the identity's MaxSandboxes holds), and the same error codes a real
// manager answers with (not_found, conflict, bad_request, too_large,
// limit_exceeded, server_stopping).
package fakesandboxes

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// Defaults of a sandbox's lifetime, as the real manager's.
const (
	DefaultTTL         = time.Hour
	DefaultIdleTimeout = 15 * time.Minute
)

// Manager is the fake. Set its exported fields before the first call.
type Manager struct {
	// MaxSandboxes, when positive, makes Create answer limit_exceeded once
	// that many sandboxes are running.
	MaxSandboxes int
	// Now is the clock (time.Now when nil); tests move it to expire
	// sandboxes.
	Now func() time.Time
	// LogLimit is how much of each exec's stream is kept to be read later
	// (sandboxes.DefaultLogLimit when 0), as the real manager's option.
	LogLimit int64

	dir string

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	closed    bool
	closes    int
	// snapOwners are the identities whose sandboxes took each snapshot,
	// by its hex digest.
	snapOwners map[string]map[string]bool
}

type sandbox struct {
	owner string
	info  sandboxes.Info
	spec  sandboxes.Spec
	dir   string
	root  *os.Root
	execs map[string]*execState
	seq   int

	snapshots []sandboxes.SnapshotInfo
}

// New returns a fake whose sandboxes are directories under dir (a test's
// t.TempDir()).
func New(dir string) *Manager {
	return &Manager{dir: dir, sandboxes: map[string]*sandbox{}}
}

var _ sandboxes.Manager = (*Manager)(nil)

func (m *Manager) now() time.Time {
	if m.Now != nil {
		return m.Now().UTC()
	}
	return time.Now().UTC()
}

// Closed reports how many times Close was called.
func (m *Manager) Closed() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closes
}

// Dir is the host directory that plays sandbox id's workspace.
func (m *Manager) Dir(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sb, ok := m.sandboxes[id]; ok {
		return sb.dir
	}
	return ""
}

func (m *Manager) Create(ctx context.Context, s sandboxes.Spec) (sandboxes.Info, error) {
	switch s.Isolation {
	case "", "namespace", "vm", "auto":
	default:
		return sandboxes.Info{}, sandboxes.Errorf(sandboxes.CodeBadRequest, "isolation %q: want namespace, vm or auto", s.Isolation)
	}
	for _, p := range s.Packages {
		if p == "" {
			return sandboxes.Info{}, sandboxes.Errorf(sandboxes.CodeBadRequest, "packages: an empty package name; name a nixpkgs attribute such as \"python3\"")
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return sandboxes.Info{}, stopping()
	}
	if m.MaxSandboxes > 0 {
		n := 0
		for _, sb := range m.sandboxes {
			if sb.info.State == sandboxes.StateRunning {
				n++
			}
		}
		if n >= m.MaxSandboxes {
			return sandboxes.Info{}, sandboxes.Errorf(sandboxes.CodeLimit, "%d sandboxes are running, the most this server allows: kill one first", n)
		}
	}
	var b [6]byte
	rand.Read(b[:])
	id := "sb-" + hex.EncodeToString(b[:])
	who := caller(ctx)
	if who.MaxSandboxes > 0 {
		n := 0
		for _, sb := range m.sandboxes {
			if sb.owner == who.Name && sb.info.State == sandboxes.StateRunning {
				n++
			}
		}
		if n >= who.MaxSandboxes {
			return sandboxes.Info{}, sandboxes.Errorf(sandboxes.CodeLimit, "identity %s already holds %d sandboxes, its limit (max_sandboxes %d); kill one first", who.Name, n, who.MaxSandboxes)
		}
	}
	dir := filepath.Join(m.dir, id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return sandboxes.Info{}, sandboxes.Errorf(sandboxes.CodeInternal, "create the workspace of sandbox %s: %w", id, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return sandboxes.Info{}, sandboxes.Errorf(sandboxes.CodeInternal, "open the workspace of sandbox %s: %w", id, err)
	}
	isolation := s.Isolation
	if isolation == "" || isolation == "auto" {
		isolation = "namespace"
	}
	ttl, idle := s.TTL.D(), s.IdleTimeout.D()
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if idle == 0 {
		idle = DefaultIdleTimeout
	}
	now := m.now()
	labels := maps.Clone(s.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	sb := &sandbox{
		spec:  s,
		dir:   dir,
		root:  root,
		owner: who.Name,
		info: sandboxes.Info{
			ID: id, State: sandboxes.StateRunning, Isolation: isolation, Labels: labels,
			Created: now, ExpiresAt: now.Add(ttl), IdleTimeout: sandboxes.Duration(idle), LastActive: now,
			Step: s, Owner: who.Name,
		},
		execs: map[string]*execState{},
	}
	m.sandboxes[id] = sb
	if s.FromSnapshot != "" {
		if err := m.restoreLocked(ctx, sb, s.FromSnapshot); err != nil {
			delete(m.sandboxes, id)
			return sandboxes.Info{}, err
		}
	}
	return sb.copyInfo(), nil
}

func stopping() error {
	return sandboxes.Errorf(sandboxes.CodeStopped, "the server is shutting down: retry against a new server")
}

func (sb *sandbox) copyInfo() sandboxes.Info {
	i := sb.info
	i.Labels = maps.Clone(i.Labels)
	return i
}

// caller is ctx's identity, sandboxes.Operator without one.
func caller(ctx context.Context) sandboxes.Identity {
	if id, ok := sandboxes.IdentityFrom(ctx); ok {
		return id
	}
	return sandboxes.Operator
}

// lookup finds a sandbox of the caller and ends it if its time is up;
// another identity's is not found. m.mu is held.
func (m *Manager) lookup(ctx context.Context, id string) (*sandbox, error) {
	if m.closed {
		return nil, stopping()
	}
	sb, ok := m.sandboxes[id]
	if !ok || !caller(ctx).Owns(sb.owner) {
		return nil, sandboxes.Errorf(sandboxes.CodeNotFound, "no sandbox %q: list the sandboxes with GET /v1/sandboxes", id)
	}
	if sb.info.State == sandboxes.StateRunning {
		now := m.now()
		switch {
		case now.After(sb.info.ExpiresAt):
			sb.stop("expired")
		case now.Sub(sb.info.LastActive) > sb.info.IdleTimeout.D():
			sb.stop("idle")
		}
	}
	return sb, nil
}

// running is lookup for an action that needs the sandbox running, and
// marks it active.
func (m *Manager) running(ctx context.Context, id string) (*sandbox, error) {
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.info.State != sandboxes.StateRunning {
		return nil, sandboxes.Errorf(sandboxes.CodeConflict, "sandbox %s is stopped (%s): create a new one", id, sb.info.Ended)
	}
	sb.info.LastActive = m.now()
	return sb, nil
}

// stop ends a sandbox: its running execs are killed and its record is
// "closed". m.mu is held.
func (sb *sandbox) stop(why string) {
	if sb.info.State != sandboxes.StateRunning {
		return
	}
	for _, e := range sb.execs {
		e.kill(false)
		e.unpin()
	}
	// As the real manager, a stopped sandbox's execs are let go: their
	// output is in its record.
	sb.execs = map[string]*execState{}
	sb.root.Close()
	sum := sha256.Sum256([]byte("fake record of " + sb.info.ID))
	sb.info.State = sandboxes.StateStopped
	sb.info.Ended = why
	sb.info.Record = hex.EncodeToString(sum[:])
}

func (m *Manager) Get(ctx context.Context, id string) (sandboxes.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return sandboxes.Info{}, err
	}
	return sb.copyInfo(), nil
}

func (m *Manager) List(ctx context.Context, labels map[string]string) ([]sandboxes.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, stopping()
	}
	out := []sandboxes.Info{}
	for id := range m.sandboxes {
		sb, err := m.lookup(ctx, id)
		if err != nil {
			continue // another identity's
		}
		match := true
		for k, v := range labels {
			if got, ok := sb.info.Labels[k]; !ok || got != v {
				match = false
			}
		}
		if match {
			out = append(out, sb.copyInfo())
		}
	}
	slices.SortFunc(out, func(a, b sandboxes.Info) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

func (m *Manager) Extend(ctx context.Context, id string, ttl, idle time.Duration) (sandboxes.Info, error) {
	if ttl < 0 || idle < 0 {
		return sandboxes.Info{}, sandboxes.Errorf(sandboxes.CodeBadRequest, "extend: durations must not be negative")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, err := m.running(ctx, id)
	if err != nil {
		return sandboxes.Info{}, err
	}
	if ttl > 0 {
		sb.info.ExpiresAt = m.now().Add(ttl)
	}
	if idle > 0 {
		sb.info.IdleTimeout = sandboxes.Duration(idle)
	}
	return sb.copyInfo(), nil
}

func (m *Manager) Kill(ctx context.Context, id string) (sandboxes.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return sandboxes.Info{}, err
	}
	sb.stop("killed")
	return sb.copyInfo(), nil
}

// Close stops every sandbox; the fake answers server_stopping afterwards.
func (m *Manager) Close(_ context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closes++
	for _, sb := range m.sandboxes {
		sb.stop("server stopped")
	}
	m.closed = true
	return nil
}
