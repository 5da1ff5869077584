package sandboxes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/inputs"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Options configure the manager.
type Options struct {
	// Engine is what every sandbox is opened with: policy, host facts,
	// backends (the namespace backend holds sessions), store, run root,
	// host state directory, Nix realiser, input fetcher, tool version.
	// WorkflowPath and WorkflowBytes are set per sandbox.
	Engine engine.Options
	// TemplateDir holds the workflow files a spec may name as templates;
	// empty refuses templates.
	TemplateDir string
	// Realiser, when set, makes the Nix realiser of one sandbox's
	// workflow (written to path); nil: no Nix, and a spec with packages
	// is refused.
	Realiser func(w *workflow.Workflow, path string) engine.RealiseFunc
	// MaxSandboxes bounds the running sandboxes (default 32).
	MaxSandboxes int
	// DefaultTTL and DefaultIdle apply when a spec gives none (1h, 15m);
	// MaxTTL bounds any TTL asked for (24h).
	DefaultTTL, DefaultIdle, MaxTTL time.Duration
	// LogLimit is the most of each exec's stream the server keeps: on
	// disk as it comes, in the record once the command ends, for any
	// reader to read later (default DefaultLogLimit). Past it, output
	// reaches only the readers that keep up (output.go).
	LogLimit int64
	// KeepStopped is how long a stopped sandbox's Info is still shown
	// (Get, List) after it stopped; its record stays (default 1h). At most
	// maxStopped are shown.
	KeepStopped time.Duration
	// Logf reports what happens in the background (expiries).
	Logf func(format string, args ...any)
	// ReapEvery is how often expiry and idleness are checked (1s).
	ReapEvery time.Duration
	// DecisionLog receives one JSON line per action decision (policy.go);
	// nil keeps none.
	DecisionLog io.Writer
	// MaxRuns bounds the workflows run at once (runs.go; default 4).
	MaxRuns int
	// Warm lists the specs the manager keeps sandboxes of opened ahead,
	// and how many, for creates that ask for the same (warm.go).
	Warm []WarmSpec
	// MaxSnapshots and MaxSnapshotBytes bound the snapshots one sandbox
	// holds (distinct trees, and their NARs' bytes), SnapshotStoreBytes
	// those of every running sandbox together (defaults 16, 4 GiB,
	// 32 GiB; snapcollect.go). A sandbox's snapshots are collected once it
	// has stopped.
	MaxSnapshots                         int
	MaxSnapshotBytes, SnapshotStoreBytes int64
	// Inputs fetches workflow inputs, file inputs beneath TemplateDir
	// (inputs.go): the operator's workflows with it as it is (it is
	// Engine.Fetch when that is nil), an inline workflow sent by an API
	// caller under the policy's api_inputs. nil: Engine.Fetch alone, and
	// an inline workflow with inputs is refused.
	Inputs *inputs.Fetcher
	// Remote is the shared store every record the manager writes is
	// pushed to (share.go); nil: records stay in the state directory.
	Remote record.Remote
}

// Manager is the real Manager: sandboxes opened through the engine.
type manager struct {
	o   Options
	pol policyHolder

	mu      sync.Mutex
	boxes   map[string]*box
	closing bool
	opening sync.WaitGroup // Creates between their reservation and their end
	runs    int            // workflows running (runs.go)
	runsWG  sync.WaitGroup // the same, to wait for at Close
	// pushes are the records being pushed to Options.Remote (share.go),
	// at most maxPushes at once (pushSlots).
	pushes    sync.WaitGroup
	pushSlots chan struct{}
	// creating and runsBy count, by owner, the creates between their
	// first check and their box's reservation, and the runs under way:
	// with the boxes they are what an identity's limits bound.
	creating map[string]int
	runsBy   map[string]int

	snaps snapshotState // snapcollect.go

	warm       []*warmPool    // one per Options.Warm
	discarding sync.WaitGroup // warm sandboxes being discarded (closeWarm waits)

	stop chan struct{}
	done chan struct{}
}

// New starts a manager and its reaper of expired and idle sandboxes.
func New(o Options) (Manager, error) {
	if o.Engine.Store == nil || o.Engine.Policy == nil {
		return nil, errors.New("sandboxes: the engine options need a record store and a policy")
	}
	if o.MaxSandboxes <= 0 {
		o.MaxSandboxes = 32
	}
	if o.DefaultTTL <= 0 {
		o.DefaultTTL = time.Hour
	}
	if o.DefaultIdle <= 0 {
		o.DefaultIdle = 15 * time.Minute
	}
	if o.MaxTTL <= 0 {
		o.MaxTTL = 24 * time.Hour
	}
	if o.LogLimit <= 0 {
		o.LogLimit = DefaultLogLimit
	}
	if o.KeepStopped <= 0 {
		o.KeepStopped = time.Hour
	}
	if o.ReapEvery <= 0 {
		o.ReapEvery = time.Second
	}
	if o.MaxRuns <= 0 {
		o.MaxRuns = 4
	}
	if o.MaxSnapshots <= 0 {
		o.MaxSnapshots = DefaultMaxSnapshots
	}
	if o.MaxSnapshotBytes <= 0 {
		o.MaxSnapshotBytes = DefaultMaxSnapshotBytes
	}
	if o.SnapshotStoreBytes <= 0 {
		o.SnapshotStoreBytes = DefaultSnapshotStoreBytes
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	m := &manager{o: o, boxes: map[string]*box{}, creating: map[string]int{}, runsBy: map[string]int{},
		stop: make(chan struct{}), done: make(chan struct{}), pushSlots: make(chan struct{}, maxPushes)}
	m.snaps.init()
	if m.o.Engine.Fetch == nil && m.o.Inputs != nil {
		m.o.Engine.Fetch = m.fetchFrom(m.o.Inputs)
	}
	if err := m.checkWarm(); err != nil {
		return nil, &Error{Code: CodeBadRequest, Message: err.Error(), Err: err}
	}
	// The sandboxes of a server that was killed died with it; their
	// records are closed from their journals.
	recovered, err := m.recoverJournals()
	for sb, id := range recovered {
		o.Logf("sandbox %s: ended with the server that was killed; its record is %s", sb, id)
		m.share(id)
	}
	if err != nil {
		o.Logf("%v", err)
	}
	m.pol.log = o.DecisionLog
	if p, ok := o.Engine.Policy.(*policy.Engine); ok {
		m.pol.pol = p
	}
	go m.reap()
	go m.collector() // first what the server killed before left
	m.startWarm()
	return m, nil
}

// newID is a sandbox's (and an exec's) id: 128 random bits as 32 hex
// digits, unique across machines (records and snapshots travel between
// them through a shared store) and a DNS label, as the E2B host form
// {port}-{id}.{domain} needs.
func newID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

func (m *manager) Create(ctx context.Context, s Spec) (Info, error) {
	ttl, idle := s.TTL.D(), s.IdleTimeout.D()
	if ttl == 0 {
		ttl = m.o.DefaultTTL
	}
	if idle == 0 {
		idle = m.o.DefaultIdle
	}
	if ttl > m.o.MaxTTL {
		return Info{}, Errorf(CodeBadRequest, "ttl %s is over this server's maximum %s", ttl, m.o.MaxTTL)
	}
	for k := range s.Labels {
		if k == "" || len(k) > 63 {
			return Info{}, Errorf(CodeBadRequest, "label key %q: want 1 to 63 characters", k)
		}
	}
	// A full server refuses before it parses the spec or reads a
	// template, unless a warm sandbox (whose place is taken already) might
	// serve it; the count is checked again below, where it is reserved.
	// So does an identity at its own limit, whose place is held from here
	// to the reservation.
	who := caller(ctx)
	m.mu.Lock()
	if m.inUse() >= m.o.MaxSandboxes && m.warmReady() == 0 {
		err := m.limitError()
		m.mu.Unlock()
		return Info{}, err
	}
	if err := m.ownerLimit(who); err != nil {
		m.mu.Unlock()
		return Info{}, err
	}
	m.creating[who.Name]++
	m.mu.Unlock()
	held := true
	defer func() {
		if held {
			m.mu.Lock()
			m.doneCreating(who.Name)
			m.mu.Unlock()
		}
	}()
	if s.FromSnapshot != "" {
		defer m.holdTree(s.FromSnapshot)() // not collected before it is restored
		if _, err := m.snapshotDigest(ctx, m.o.Engine.Store, s.FromSnapshot); err != nil {
			return Info{}, err
		}
	}
	id, err := newID()
	if err != nil {
		return Info{}, err
	}
	w, raw, filename, err := specWorkflow(s, id, m.o.TemplateDir)
	if err != nil {
		return Info{}, err
	}
	if _, err := m.authorize(ctx, nil, policy.Action{Action: policy.ActionCreate,
		Sandbox: policy.ActionSandbox{Labels: s.Labels, Isolation: string(w.Steps[0].Isolation)}, Step: canonicalStep(w.Steps[0])}); err != nil {
		return Info{}, err
	}
	// A warm sandbox already holds its place under MaxSandboxes, which
	// passes to the box; any other create needs a free one.
	warm := m.takeWarm(w) // nil unless a pool of a spec that makes w has one ready
	if warm != nil {
		id = warm.id
	}
	m.mu.Lock()
	switch {
	case m.closing:
		m.mu.Unlock()
		if warm != nil {
			m.discardWarm([]*warmBox{warm})
		}
		return Info{}, Errorf(CodeStopped, "the server is stopping")
	case warm == nil && m.inUse() >= m.o.MaxSandboxes:
		err := m.limitError()
		m.mu.Unlock()
		return Info{}, err
	}
	if warm != nil {
		m.handOver(warm)
	}
	// Reserve the place while the sandbox is being opened; from here the
	// box counts against its owner's limit.
	b := &box{m: m, id: id, owner: who.Name, execs: map[string]*execState{}}
	m.boxes[id] = b
	m.doneCreating(who.Name)
	held = false
	m.opening.Add(1)
	m.mu.Unlock()
	defer m.opening.Done()

	var sb *engine.Sandbox
	if warm != nil {
		sb = warm.sb
	} else {
		sb, err = engine.OpenSandbox(ctx, w, id, m.engineOptions(w, filename, raw))
		m.logOpened(sb, id, err)
	}
	if err != nil {
		m.mu.Lock()
		delete(m.boxes, id)
		m.mu.Unlock()
		return Info{}, openError(err)
	}
	m.mu.Lock()
	closing := m.closing
	m.mu.Unlock()
	if closing { // Close ran while this one was being opened
		_, cerr := sb.Close(context.WithoutCancel(ctx), "server stopped", s.Labels, nil)
		m.mu.Lock()
		delete(m.boxes, id)
		m.mu.Unlock()
		return Info{}, &Error{Code: CodeStopped, Message: "the server is stopping", Err: cerr}
	}
	now := time.Now().UTC()
	sb.SetOwner(who.Name) // before the journal's draft and any kill
	b.mu.Lock()
	b.sb = sb
	b.labels = maps.Clone(s.Labels)
	b.info = Info{
		ID: id, State: StateRunning, Isolation: string(sb.Step.Isolation), Labels: maps.Clone(s.Labels),
		Created: now, ExpiresAt: now.Add(ttl), IdleTimeout: Duration(idle), LastActive: now,
		Step: canonicalStep(sb.Step), Owner: who.Name,
	}
	if b.info.Labels == nil {
		b.info.Labels = map[string]string{}
	}
	info := b.info
	if err := m.openJournal(b); err != nil {
		m.o.Logf("sandbox %s: start its journal (its record is lost if the server is killed): %v", id, err)
	}
	b.mu.Unlock()
	if s.FromSnapshot != "" {
		if err := b.restore(ctx, m, s.FromSnapshot); err != nil {
			_ = b.kill(context.WithoutCancel(ctx), "its snapshot could not be restored")
			return Info{}, err
		}
	}
	return info, nil
}

// engineOptions are the engine's options for opening the sandbox of w,
// whose spec was written to filename as raw: the policy now in force,
// replaced or not, and the workflow's Nix realiser.
func (m *manager) engineOptions(w *workflow.Workflow, filename string, raw []byte) engine.Options {
	eo := m.o.Engine
	eo.WorkflowPath, eo.WorkflowBytes = filename, raw
	if p := m.policy(); p != nil {
		eo.Policy = p
	}
	eo.Events = nil
	if m.o.Realiser != nil {
		eo.Realise = m.o.Realiser(w, filename)
	}
	return eo
}

// openError sorts an error of engine.OpenSandbox into the API's codes: a
// policy denial is 403 with its decision id, a bad spec 400, the rest the
// host's failure.
func openError(err error) error {
	var denied *policy.DeniedError
	if errors.As(err, &denied) {
		return &Error{Code: CodeDenied, Message: err.Error(), Decision: denied.Decision.ID.String(), Err: err}
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	if errors.Is(err, engine.ErrNoNix) {
		return &Error{Code: CodeBadRequest, Message: err.Error(), Err: err}
	}
	return &Error{Code: CodeInternal, Message: "open the sandbox: " + err.Error(), Err: err}
}

func canonicalStep(s workflow.Step) any {
	b, err := json.Marshal(s)
	if err != nil {
		return nil
	}
	var v any
	_ = json.Unmarshal(b, &v)
	return v
}

// inUse counts what holds a place under MaxSandboxes, the one count
// creates and warm pools are both bounded by: the sandboxes not stopped
// (those being created too), and the warm ones, ready, being opened,
// handed to a create or being discarded. m.mu is held.
func (m *manager) inUse() int {
	n := m.running()
	for _, p := range m.warm {
		p.mu.Lock()
		n += p.places()
		p.mu.Unlock()
	}
	return n
}

// warmReady counts the warm sandboxes ready to be handed out; m.mu is
// held.
func (m *manager) warmReady() int {
	n := 0
	for _, p := range m.warm {
		p.mu.Lock()
		n += len(p.ready)
		p.mu.Unlock()
	}
	return n
}

// limitError is a create's refusal when inUse has reached MaxSandboxes;
// m.mu is held.
func (m *manager) limitError() error {
	n := m.running()
	return Errorf(CodeLimit, "this server already holds %d sandboxes (%d running, %d warm), its limit; kill one (DELETE /v1/sandboxes/ID) first", m.o.MaxSandboxes, n, m.inUse()-n)
}

// ownerLimit refuses a create of who at its own MaxSandboxes: its
// sandboxes not stopped (those being opened too) and its creates not yet
// reserved. m.mu is held.
func (m *manager) ownerLimit(who Identity) error {
	if who.MaxSandboxes <= 0 {
		return nil
	}
	n := m.creating[who.Name]
	for _, b := range m.boxes {
		if b.owner == who.Name && !b.stopped() {
			n++
		}
	}
	if n >= who.MaxSandboxes {
		return Errorf(CodeLimit, "identity %s already holds %d sandboxes, its limit (max_sandboxes %d); kill one (DELETE /v1/sandboxes/ID) first", who.Name, n, who.MaxSandboxes)
	}
	return nil
}

// doneCreating ends a create's hold on its owner's place; m.mu is held.
func (m *manager) doneCreating(owner string) {
	if m.creating[owner]--; m.creating[owner] <= 0 {
		delete(m.creating, owner)
	}
}

// running counts the sandboxes not stopped; m.mu is held.
func (m *manager) running() int {
	n := 0
	for _, b := range m.boxes {
		if !b.stopped() {
			n++
		}
	}
	return n
}

// box finds sandbox id for the caller of ctx: another identity's
// sandbox is answered exactly as one that does not exist.
func (m *manager) box(ctx context.Context, id string) (*box, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.boxes[id]
	if !ok || !caller(ctx).Owns(b.owner) {
		return nil, Errorf(CodeNotFound, "no sandbox %q on this server (GET /v1/sandboxes lists them)", id)
	}
	return b, nil
}

// live returns a running, opened sandbox for an action, marking it active.
func (m *manager) live(ctx context.Context, id string) (*box, error) {
	b, err := m.box(ctx, id)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.info.State == StateStopped {
		return nil, Errorf(CodeConflict, "sandbox %s is stopped (%s); its record is %s", id, b.info.Ended, b.info.Record)
	}
	if b.sb == nil {
		return nil, Errorf(CodeConflict, "sandbox %s is still being created", id)
	}
	if b.info.State != StateRunning {
		return nil, Errorf(CodeConflict, "sandbox %s is stopped (%s); its record is %s", id, b.info.Ended, b.info.Record)
	}
	b.info.LastActive = time.Now().UTC()
	return b, nil
}

func (m *manager) Get(ctx context.Context, id string) (Info, error) {
	b, err := m.box(ctx, id)
	if err != nil {
		return Info{}, err
	}
	return b.snapshot(), nil
}

func (m *manager) List(ctx context.Context, labels map[string]string) ([]Info, error) {
	who := caller(ctx)
	m.mu.Lock()
	var bs []*box
	for _, b := range m.boxes {
		if who.Owns(b.owner) {
			bs = append(bs, b)
		}
	}
	m.mu.Unlock()
	out := []Info{}
	for _, b := range bs {
		info := b.snapshot()
		if info.ID == "" {
			continue // still being created
		}
		match := true
		for k, v := range labels {
			if info.Labels[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

func (m *manager) Extend(ctx context.Context, id string, ttl, idle time.Duration) (Info, error) {
	b, err := m.live(ctx, id)
	if err != nil {
		return Info{}, err
	}
	if ttl > m.o.MaxTTL {
		return Info{}, Errorf(CodeBadRequest, "ttl %s is over this server's maximum %s", ttl, m.o.MaxTTL)
	}
	b.mu.Lock()
	if ttl > 0 {
		b.info.ExpiresAt = time.Now().UTC().Add(ttl)
	}
	if idle > 0 {
		b.info.IdleTimeout = Duration(idle)
	}
	b.mu.Unlock()
	return b.snapshot(), nil
}

func (m *manager) Kill(ctx context.Context, id string) (Info, error) {
	b, err := m.box(ctx, id)
	if err != nil {
		return Info{}, err
	}
	if err := b.kill(ctx, "killed"); err != nil {
		return b.snapshot(), &Error{Code: CodeInternal, Message: fmt.Sprintf("kill sandbox %s: %v (agentsandbox gc removes what is left)", id, err), Err: err}
	}
	return b.snapshot(), nil
}

// Close kills every sandbox and stops the reaper.
func (m *manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		<-m.done
		return nil
	}
	m.closing = true
	bs := slices.Collect(maps.Values(m.boxes))
	m.mu.Unlock()
	close(m.stop)
	<-m.done
	// A Create under way sees closing when it is done and closes its
	// sandbox itself; wait for it, so nothing outlives Close.
	m.opening.Wait()
	warmErr := m.closeWarm(ctx)
	// Runs see the stop and cancel their steps; their records are written.
	m.runsWG.Wait()
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, b := range bs {
		b.mu.Lock()
		opening := b.sb == nil // Create closes it itself
		b.mu.Unlock()
		if opening {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.kill(ctx, "server stopped"); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("sandbox %s: %w", b.id, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// The stopped sandboxes' snapshots go with them, now rather than at
	// the next start.
	close(m.snaps.stop)
	<-m.snaps.done
	if _, err := m.collectPending(); err != nil {
		errs = append(errs, fmt.Errorf("collect snapshots: %w", err))
	}
	m.pushes.Wait() // the records just written reach the shared store
	return errors.Join(append(errs, warmErr)...)
}

// maxStopped bounds the stopped sandboxes whose Info the manager keeps.
const maxStopped = 1024

// release lets go of a killed sandbox: what it held (its engine sandbox,
// its execs and their output, its record's entries) goes, and a box with
// only its Info and snapshots takes its place until KeepStopped has
// passed (pruneStopped). A request already under way on the old box ends
// as on any stopped sandbox.
func (m *manager) release(b *box) {
	b.mu.Lock()
	t := &box{m: m, id: b.id, owner: b.owner, info: b.info, labels: b.labels, snapshots: b.snapshots,
		killing: true, killed: b.killed, killErr: b.killErr, stoppedAt: time.Now()}
	b.execs, b.entries = map[string]*execState{}, nil
	b.mu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.boxes[b.id] == b {
		m.boxes[b.id] = t
	}
	m.pruneStopped(t.stoppedAt)
}

// pruneStopped forgets the stopped sandboxes kept longer than KeepStopped,
// and the oldest past maxStopped; m.mu is held.
func (m *manager) pruneStopped(now time.Time) {
	var kept []*box
	for id, b := range m.boxes {
		if b.stoppedAt.IsZero() {
			continue
		}
		if now.Sub(b.stoppedAt) > m.o.KeepStopped {
			delete(m.boxes, id)
			continue
		}
		kept = append(kept, b)
	}
	if len(kept) <= maxStopped {
		return
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].stoppedAt.Before(kept[j].stoppedAt) })
	for _, b := range kept[:len(kept)-maxStopped] {
		delete(m.boxes, b.id)
	}
}

// reap stops sandboxes past their expiry, idle past their timeout (with
// no command running), or whose sandbox ended on its own.
func (m *manager) reap() {
	defer close(m.done)
	t := time.NewTicker(m.o.ReapEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		m.mu.Lock()
		m.pruneStopped(now)
		bs := slices.Collect(maps.Values(m.boxes))
		m.mu.Unlock()
		for _, b := range bs {
			if why := b.expired(now); why != "" {
				m.o.Logf("sandbox %s: %s", b.id, why)
				if err := b.kill(context.Background(), why); err != nil {
					m.o.Logf("sandbox %s: stop: %v", b.id, err)
				}
			}
		}
	}
}

// addEntry appends an action into a record entry: its blob and a summary.
func (b *box) addEntry(a record.Action, summary string) {
	raw, err := json.Marshal(a)
	if err != nil {
		return
	}
	d, _, err := b.sb.Store().PutBlob(bytesReader(raw))
	if err != nil {
		b.m.o.Logf("sandbox %s: store an entry of its record: %v", b.id, err)
		return
	}
	b.mu.Lock()
	b.seq++
	e := record.Entry{Seq: b.seq, Time: a.Time, Kind: a.Kind, Digest: d, Summary: summary}
	b.entries = append(b.entries, e)
	b.journalEntry(e)
	b.mu.Unlock()
}
