package sandboxes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Warm pools: for each WarmSpec of Options.Warm, N sandboxes of its spec
// opened ahead of any request, so that a create whose spec makes the same
// sandbox gets one at once instead of paying its admission, Nix
// realisation, workspace, netns, cgroup and jail. "The same sandbox" is
// compared on the workflow the spec makes, its isolation resolved (warmKey):
// labels, ttl, idleTimeout and fromSnapshot belong to the request and may
// be anything. Any other create is opened as before.
//
// A warm sandbox is a whole sandbox, admitted by the policy in force when
// it was opened. It is handed out only while that policy is still in
// force (the same bundle digest), while the spec still makes the same
// workflow (a template file edited since makes another), and while its
// init is alive; the others are discarded and replaced. Its ID, netns and
// cgroup were named when it was opened; its TTL and idle time start when
// it is handed out, and its record's start is its opening. A warm sandbox
// nobody took is discarded without a record (nothing ran in it). The pools
// count against MaxSandboxes: they never fill past what the running
// sandboxes leave, and a create of another spec is refused when the
// running and the warm ones together reach it (manager.inUse).

// WarmSpec asks for N sandboxes of Spec kept opened ahead. Only the fields
// that make the sandbox's workflow matter (template, isolation, packages,
// resources, network, env).
type WarmSpec struct {
	Spec Spec
	N    int
}

type warmPool struct {
	spec WarmSpec

	mu    sync.Mutex
	ready []*warmBox
	// opening counts the sandboxes the filler is opening, and held those
	// out of ready that still hold a place under MaxSandboxes: handed to
	// a create that has not added its box yet, or being discarded.
	opening, held int

	hits int // creates served from the pool
	// misses counts creates of this spec that found the pool empty.
	misses int

	wake chan struct{} // buffered 1: something was taken or discarded
	done chan struct{} // closed when the filler has returned
}

type warmBox struct {
	pool   *warmPool
	id     string
	sb     *engine.Sandbox
	bundle policy.Digest // the policy that admitted it
	key    []byte        // warmKey of its spec when it was opened
}

// warmKey is what decides whether a spec can take a warm sandbox: the
// canonical form of the workflow it makes, under one placeholder id (the
// id is the workflow's name), with its isolation resolved on this host
// as the sandbox's would be (so "isolation: namespace" is the default).
// It is nil for a spec that makes no workflow.
func (m *manager) warmKey(s Spec) []byte {
	w, _, _, err := specWorkflow(s, warmID, m.o.TemplateDir)
	if err != nil {
		return nil
	}
	return m.workflowKey(w)
}

// warmID is the placeholder id warm keys are made under.
const warmID = "warm"

// workflowKey is warmKey of the spec that made w (specWorkflow), under
// whatever id: a create compares the workflow it has already made.
func (m *manager) workflowKey(w *workflow.Workflow) []byte {
	c := *w
	c.Name = "sandbox-" + warmID // specWorkflow names it after the id
	plan, err := engine.Resolve(&c, m.o.Engine.Isolation, m.o.Engine.Host.Policy())
	if err != nil {
		return nil
	}
	b, err := plan.Canonical()
	if err != nil {
		return nil
	}
	return b
}

// checkWarm refuses warm specs that make no sandbox, before any is opened.
func (m *manager) checkWarm() error {
	total := 0
	for _, ws := range m.o.Warm {
		if ws.N < 1 {
			return fmt.Errorf("warm pool of %s: %d sandboxes; want 1 or more", warmName(ws.Spec), ws.N)
		}
		total += ws.N
		if _, _, _, err := specWorkflow(ws.Spec, "warm", m.o.TemplateDir); err != nil {
			return fmt.Errorf("warm pool of %s: %w", warmName(ws.Spec), err)
		}
	}
	if total > m.o.MaxSandboxes {
		return fmt.Errorf("warm pools of %d sandboxes in all, over MaxSandboxes (%d)", total, m.o.MaxSandboxes)
	}
	return nil
}

func warmName(s Spec) string {
	if s.Template != "" {
		return "template " + s.Template
	}
	return "the default spec"
}

// startWarm starts one filler per pool.
func (m *manager) startWarm() {
	for _, ws := range m.o.Warm {
		p := &warmPool{spec: ws, wake: make(chan struct{}, 1), done: make(chan struct{})}
		m.warm = append(m.warm, p)
		go m.fillWarm(p)
	}
}

func (p *warmPool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// wantsWarm reports whether p should open one more: it is short, and the
// running sandboxes and the pools leave room under MaxSandboxes. When it
// should, the place is taken (p.opening) before m.mu is let go, so a
// create cannot take it too; openWarm gives it back. It first discards
// what p can no longer hand out.
func (m *manager) wantsWarm(p *warmPool) bool {
	m.drainPool(p, m.warmKey(p.spec.Spec))
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return false
	}
	room := m.o.MaxSandboxes - m.inUse()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ready)+p.opening >= p.spec.N || room <= 0 {
		return false
	}
	p.opening++
	return true
}

// places counts what p holds under MaxSandboxes; p.mu is held.
func (p *warmPool) places() int { return len(p.ready) + p.opening + p.held }

// release gives back n places p held (held, not ready) and has the
// filler look again.
func (p *warmPool) release(n int) {
	p.mu.Lock()
	p.held -= n
	p.mu.Unlock()
	p.poke()
}

// warmCheckEvery is how often a full pool looks for warm sandboxes it can
// no longer hand out (an init that died, a template edited).
const warmCheckEvery = 5 * time.Second

// fillWarm keeps p full until the manager closes. An open that fails (the
// policy denies the spec, the host is out of something) is logged and
// tried again after a pause that doubles up to a minute.
func (m *manager) fillWarm(p *warmPool) {
	defer close(p.done)
	backoff := time.Duration(0) // after a failed open, until the next try
	for {
		if m.wantsWarm(p) {
			err := m.openWarm(p)
			if err == nil {
				backoff = 0
				continue
			}
			backoff = min(max(2*backoff, time.Second), time.Minute)
			m.o.Logf("warm pool of %s: open a sandbox: %v (next try in %s)", warmName(p.spec.Spec), err, backoff)
			select {
			case <-m.stop:
				return
			case <-time.After(backoff):
			}
			continue
		}
		// Full: wait for a take or a discard, or look again later.
		select {
		case <-m.stop:
			return
		case <-p.wake:
		case <-time.After(warmCheckEvery):
		}
	}
}

// openWarm opens one sandbox of p's spec into p, in the place wantsWarm
// took: it passes to the sandbox in ready, or is given back.
func (m *manager) openWarm(p *warmPool) error {
	placed := false
	defer func() {
		if !placed {
			p.mu.Lock()
			p.opening--
			p.mu.Unlock()
		}
	}()
	id, err := newID()
	if err != nil {
		return err
	}
	key := m.warmKey(p.spec.Spec)
	w, raw, filename, err := specWorkflow(p.spec.Spec, id, m.o.TemplateDir)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-m.stop: // Close: stop opening
			cancel()
		case <-ctx.Done():
		}
	}()
	sb, err := engine.OpenSandbox(ctx, w, id, m.engineOptions(w, filename, raw))
	m.logOpened(sb, id, err) // decided now, whoever takes it later
	if err != nil {
		return err
	}
	wb := &warmBox{pool: p, id: id, sb: sb, bundle: sb.Decision.BundleDigest, key: key}
	m.mu.Lock()
	closing := m.closing
	m.mu.Unlock()
	if closing || !m.usable(wb, key) {
		return sb.Discard(context.WithoutCancel(ctx)) // in its place until it is gone
	}
	p.mu.Lock()
	p.ready = append(p.ready, wb)
	p.opening--
	placed = true
	p.mu.Unlock()
	m.o.Logf("warm pool of %s: sandbox %s ready", warmName(p.spec.Spec), id)
	return nil
}

// usable reports whether wb may be handed out for a spec whose warmKey is
// key: it was opened for that workflow, admitted by the policy now in
// force, and its sandbox has not ended on its own (an init killed or out
// of memory while it waited).
func (m *manager) usable(wb *warmBox, key []byte) bool {
	if key == nil || !bytes.Equal(wb.key, key) {
		return false
	}
	select {
	case <-wb.sb.Session.Done():
		return false
	default:
	}
	pol := m.policy()
	return pol == nil || pol.BundleDigest() == wb.bundle
}

// takeWarm returns a warm sandbox for a create whose spec made w, or nil
// when no pool of a spec that makes the same workflow holds one. The
// sandbox keeps its place (its pool's held) until the create adds its box
// (handOver) or discards it.
func (m *manager) takeWarm(w *workflow.Workflow) *warmBox {
	if len(m.warm) == 0 {
		return nil
	}
	key := m.workflowKey(w)
	if key == nil {
		return nil
	}
	for _, p := range m.warm {
		if !bytes.Equal(m.warmKey(p.spec.Spec), key) {
			continue
		}
		p.mu.Lock()
		var stale []*warmBox
		var got *warmBox
		for len(p.ready) > 0 && got == nil {
			wb := p.ready[0]
			p.ready = p.ready[1:]
			if m.usable(wb, key) {
				got = wb
			} else {
				stale = append(stale, wb)
			}
		}
		if got != nil {
			p.hits++
			p.held++
		} else {
			p.misses++
		}
		p.held += len(stale)
		p.mu.Unlock()
		m.discardWarm(stale)
		p.poke()
		if got != nil {
			return got
		}
	}
	return nil
}

// handOver passes the place of wb, which takeWarm gave a create, to the
// create's box; m.mu is held, and the box is added in the same hold.
func (m *manager) handOver(wb *warmBox) {
	wb.pool.mu.Lock()
	wb.pool.held--
	wb.pool.mu.Unlock()
}

// drainWarm discards from every pool what can no longer be handed out
// (after SetPolicy: what the old policy admitted).
func (m *manager) drainWarm() {
	for _, p := range m.warm {
		m.drainPool(p, m.warmKey(p.spec.Spec))
	}
}

// drainPool discards from p what is not usable for key, and has its
// filler open replacements.
func (m *manager) drainPool(p *warmPool, key []byte) {
	p.mu.Lock()
	var keep, stale []*warmBox
	for _, wb := range p.ready {
		if m.usable(wb, key) {
			keep = append(keep, wb)
		} else {
			stale = append(stale, wb)
		}
	}
	p.ready = keep
	p.held += len(stale)
	p.mu.Unlock()
	if len(stale) > 0 {
		m.discardWarm(stale) // pokes when they are gone
	}
}

// closeWarm stops the fillers and discards every warm sandbox (Close).
// The manager's stop channel is closed by then.
func (m *manager) closeWarm(ctx context.Context) error {
	var stale []*warmBox
	for _, p := range m.warm {
		<-p.done
		p.mu.Lock()
		stale = append(stale, p.ready...)
		p.held += len(p.ready)
		p.ready = nil
		p.mu.Unlock()
	}
	err := m.discardWarmWait(ctx, stale)
	m.discarding.Wait()
	return err
}

// discardWarm discards stale in the background; each holds its place
// (counted in its pool's held) until it is gone.
func (m *manager) discardWarm(stale []*warmBox) {
	if len(stale) == 0 {
		return
	}
	m.discarding.Add(1)
	go func() {
		defer m.discarding.Done()
		_ = m.discardWarmWait(context.Background(), stale) // each failure is logged
	}()
}

func (m *manager) discardWarmWait(ctx context.Context, stale []*warmBox) error {
	var errs []error
	for _, wb := range stale {
		if err := wb.sb.Discard(ctx); err != nil {
			errs = append(errs, err)
			m.o.Logf("warm pool: discard sandbox %s: %v (agentsandbox gc removes what is left)", wb.id, err)
		}
		wb.pool.release(1)
	}
	return errors.Join(errs...)
}

// warmStats are the pools' counters, summed (tests, logs).
type warmStats struct {
	Ready, Hits, Misses int
}

func (m *manager) warmStats() warmStats {
	var st warmStats
	for _, p := range m.warm {
		p.mu.Lock()
		st.Ready += len(p.ready)
		st.Hits += p.hits
		st.Misses += p.misses
		p.mu.Unlock()
	}
	return st
}
