// Package managertest builds the real sandboxes.Manager on the fake
// backend (internal/fakebackend), FOR TESTS ONLY, so that the API surface
// (package server, its MCP and E2B transports, the sandbox CLI commands)
// is tested against the manager users get, without root, KVM or Nix.
//
// IT ISOLATES NOTHING: the fake backend runs the guest agent in-process,
// as the calling user, with the step's workspace a directory under the
// test's temporary directory and the host's PATH, files and network.
package managertest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/fakebackend"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Manager is the real manager, with what tests ask of it beside the
// sandboxes.Manager interface. It offers that interface's methods only:
// the real manager's optional ones (sandboxes.Runner, NetworkManager,
// PolicySetter) are on the embedded Manager field, so a test serves
// m.Manager for a server that runs workflows and changes networks, and m
// for one that does not.
type Manager struct {
	sandboxes.Manager
	// Backend is the fake backend every sandbox is opened on.
	Backend *fakebackend.Backend
	// Store is the manager's record store.
	Store *record.Store

	mu     sync.Mutex
	closes int
}

// New returns Open's manager with its directories under t.TempDir(),
// closed when the test ends; it fails the test when the manager cannot
// be made.
func New(t testing.TB, o sandboxes.Options) *Manager {
	t.Helper()
	m, err := Open(t.TempDir(), o)
	if err != nil {
		t.Fatalf("managertest: %v", err)
	}
	t.Cleanup(func() { m.Manager.Close(context.Background()) })
	return m
}

// Open returns the real manager with o's options, on the fake backend,
// with its store, run root and host state under dir. o.Engine is filled
// in (backends, store, directories; the default policy, one job at a
// time and tool version "test" where o leaves them unset); its other
// fields are the caller's. The caller closes it.
func Open(dir string, o sandboxes.Options) (*Manager, error) {
	store, err := record.OpenStore(filepath.Join(dir, "state"))
	if err != nil {
		return nil, fmt.Errorf("open the record store: %w", err)
	}
	fake := fakebackend.New()
	e := &o.Engine
	if e.Jobs == 0 {
		e.Jobs = 1
	}
	e.Store = store
	e.RunRoot = filepath.Join(store.Dir(), "runs")
	e.HostStateDir = filepath.Join(dir, "host-state")
	e.Backends = map[workflow.Isolation]vmrunner.Backend{workflow.IsolationNamespace: fake}
	if e.Policy == nil {
		pol, err := policy.Load(context.Background(), policy.Options{})
		if err != nil {
			return nil, fmt.Errorf("load the default policy: %w", err)
		}
		e.Policy = pol
	}
	if e.ToolVersion == "" {
		e.ToolVersion = "test"
	}
	if o.ReapEvery == 0 {
		o.ReapEvery = 50 * time.Millisecond
	}
	m, err := sandboxes.New(o)
	if err != nil {
		return nil, fmt.Errorf("new manager: %w", err)
	}
	return &Manager{Manager: m, Backend: fake, Store: store}, nil
}

// Close closes the manager and counts the call.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	m.closes++
	m.mu.Unlock()
	return m.Manager.Close(ctx)
}

// Closed reports how many times Close was called.
func (m *Manager) Closed() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closes
}

// Dir is the host directory that is sandbox id's /workspace, as the
// sandbox itself reports it (its commands run on the host, in it); ""
// when id is not running. ctx carries the identity that owns id.
func (m *Manager) Dir(ctx context.Context, id string) string {
	var out strings.Builder
	_, err := m.Exec(ctx, id, sandboxes.ExecRequest{Argv: []string{"pwd", "-P"}, Cwd: "/workspace"}, func(ev sandboxes.ExecEvent) error {
		if ev.Type == sandboxes.EventStdout {
			out.WriteString(ev.Text)
		}
		return nil
	})
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(out.String(), "\n")
}
