package sandboxes

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/policy"
)

// The warm pool: Options.Warm sandboxes of the default spec (Spec{}: the
// server's defaults, no template, packages, resources, network or env)
// opened ahead of any request, so that a create asking for exactly that
// gets one at once instead of paying its admission, workspace, netns,
// cgroup and jail. A request whose spec makes another workflow is opened
// as before.
//
// A warm sandbox is a whole sandbox, admitted by the policy in force when
// it was opened. It is handed out only while that policy is still in
// force (the same bundle digest); SetPolicy discards the others. Its ID,
// netns and cgroup were named when it was opened; its TTL and idle time
// start when it is handed out, and its record's start is its opening. A
// warm sandbox nobody took is discarded without a record (nothing ran in
// it). The pool counts against MaxSandboxes: it never fills past what
// the running sandboxes leave.
type warmPool struct {
	size int
	key  []byte // the canonical workflow of Spec{} (warmKey)

	mu    sync.Mutex
	ready []*warmBox
	// opening is set while the filler opens one.
	opening bool
	hits    int // creates served from the pool
	misses  int // creates of the default spec that found it empty

	wake       chan struct{}  // buffered 1: something was taken or discarded
	done       chan struct{}  // closed when the filler has returned
	discarding sync.WaitGroup // discards under way (closeWarm waits)
}

type warmBox struct {
	id     string
	sb     *engine.Sandbox
	bundle policy.Digest // the policy that admitted it
}

// warmKey is what decides whether a spec can take a warm sandbox: the
// canonical form of the workflow it makes, under one placeholder id (the
// id is the workflow's name), with its isolation resolved on this host
// as the sandbox's would be (so "isolation: namespace" is the default).
func (m *manager) warmKey(s Spec) []byte {
	w, _, _, err := specWorkflow(s, "warm", m.o.TemplateDir)
	if err != nil {
		return nil
	}
	plan, err := engine.Resolve(w, m.o.Engine.Isolation, m.o.Engine.Host.Policy())
	if err != nil {
		return nil
	}
	b, err := plan.Canonical()
	if err != nil {
		return nil
	}
	return b
}

// startWarm starts the filler when Options.Warm asks for a pool.
func (m *manager) startWarm() {
	if m.o.Warm <= 0 {
		return
	}
	key := m.warmKey(Spec{})
	if key == nil {
		m.o.Logf("warm pool: the default spec makes no workflow; no pool")
		return
	}
	m.warm = &warmPool{size: m.o.Warm, key: key, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go m.fillWarm()
}

func (p *warmPool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// wants reports whether the pool should open one more: it is short, and
// the running sandboxes leave room under MaxSandboxes.
func (m *manager) wantsWarm() bool {
	m.drainWarm()
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return false
	}
	room := m.o.MaxSandboxes - m.running()
	m.mu.Unlock()
	p := m.warm
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.ready)
	return n < p.size && n < room
}

// warmCheckEvery is how often a full pool looks for warm sandboxes that
// ended on their own.
const warmCheckEvery = 5 * time.Second

// fillWarm keeps the pool full until the manager closes. An open that
// fails (the policy denies the default spec, the host is out of
// something) is logged and tried again after a growing pause.
func (m *manager) fillWarm() {
	p := m.warm
	defer close(p.done)
	backoff := time.Duration(0) // after a failed open, until the next try
	for {
		if m.wantsWarm() {
			err := m.openWarm()
			if err == nil {
				backoff = 0
				continue
			}
			backoff = min(max(2*backoff, time.Second), time.Minute)
			m.o.Logf("warm pool: open a sandbox: %v (next try in %s)", err, backoff)
			select {
			case <-m.stop:
				return
			case <-time.After(backoff):
			}
			continue
		}
		// Full: wait for a take or a discard, or look again later for a
		// warm sandbox that ended on its own meanwhile.
		select {
		case <-m.stop:
			return
		case <-p.wake:
		case <-time.After(warmCheckEvery):
		}
	}
}

// openWarm opens one sandbox of the default spec into the pool.
func (m *manager) openWarm() error {
	id, err := newID()
	if err != nil {
		return err
	}
	w, raw, filename, err := specWorkflow(Spec{}, id, m.o.TemplateDir)
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
	p := m.warm
	p.mu.Lock()
	p.opening = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.opening = false
		p.mu.Unlock()
	}()
	sb, err := engine.OpenSandbox(ctx, w, id, m.engineOptions(w, filename, raw))
	m.logOpened(sb, w, id, err) // decided now, whoever takes it later
	if err != nil {
		return err
	}
	wb := &warmBox{id: id, sb: sb, bundle: sb.Decision.BundleDigest}
	m.mu.Lock()
	closing := m.closing
	m.mu.Unlock()
	if closing || !m.usable(wb) {
		return sb.Discard(context.WithoutCancel(ctx))
	}
	p.mu.Lock()
	p.ready = append(p.ready, wb)
	p.mu.Unlock()
	m.o.Logf("warm pool: sandbox %s ready", id)
	return nil
}

// usable reports whether wb may still be handed out: admitted by the
// policy now in force, and its sandbox not ended on its own (an init
// killed or out of memory while it waited).
func (m *manager) usable(wb *warmBox) bool {
	select {
	case <-wb.sb.Session.Done():
		return false
	default:
	}
	pol := m.policy()
	return pol == nil || pol.BundleDigest() == wb.bundle
}

// takeWarm returns a warm sandbox for s, or nil when s makes another
// workflow or none is ready.
func (m *manager) takeWarm(s Spec) *warmBox {
	p := m.warm
	if p == nil || !bytes.Equal(m.warmKey(s), p.key) {
		return nil
	}
	p.mu.Lock()
	var stale []*warmBox
	var got *warmBox
	for len(p.ready) > 0 && got == nil {
		wb := p.ready[0]
		p.ready = p.ready[1:]
		if m.usable(wb) {
			got = wb
		} else {
			stale = append(stale, wb)
		}
	}
	if got != nil {
		p.hits++
	} else {
		p.misses++
	}
	p.mu.Unlock()
	m.discardWarm(stale)
	p.poke()
	return got
}

// putBackWarm returns a sandbox takeWarm gave that the create could not
// use (the server was full).
func (m *manager) putBackWarm(wb *warmBox) {
	p := m.warm
	p.mu.Lock()
	p.ready = append([]*warmBox{wb}, p.ready...)
	p.hits--
	p.mu.Unlock()
}

// drainWarm discards the warm sandboxes that can no longer be handed out
// (usable: after SetPolicy, those the old policy admitted), and has the
// filler open new ones.
func (m *manager) drainWarm() {
	p := m.warm
	if p == nil {
		return
	}
	p.mu.Lock()
	var keep, stale []*warmBox
	for _, wb := range p.ready {
		if m.usable(wb) {
			keep = append(keep, wb)
		} else {
			stale = append(stale, wb)
		}
	}
	p.ready = keep
	p.mu.Unlock()
	if len(stale) > 0 {
		m.discardWarm(stale)
		p.poke()
	}
}

// closeWarm stops the filler and discards every warm sandbox (Close).
// The manager's stop channel is closed by then.
func (m *manager) closeWarm(ctx context.Context) error {
	p := m.warm
	if p == nil {
		return nil
	}
	<-p.done
	p.mu.Lock()
	stale := p.ready
	p.ready = nil
	p.mu.Unlock()
	err := m.discardWarmWait(ctx, stale)
	p.discarding.Wait()
	return err
}

func (m *manager) discardWarm(stale []*warmBox) {
	if len(stale) == 0 {
		return
	}
	m.warm.discarding.Add(1)
	go func() {
		defer m.warm.discarding.Done()
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
	}
	return errors.Join(errs...)
}

// warmStats are the pool's counters (tests, logs).
type warmStats struct {
	Ready, Hits, Misses int
	Opening             bool
}

func (m *manager) warmStats() warmStats {
	p := m.warm
	if p == nil {
		return warmStats{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return warmStats{Ready: len(p.ready), Hits: p.hits, Misses: p.misses, Opening: p.opening}
}
