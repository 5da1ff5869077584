package sandboxes

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Snapshot quotas and collection.
//
// A snapshot costs its NAR in the blob store: every byte of every file,
// holes of sparse files included (two snapshots of a workspace with a
// 128 MiB sparse file that changed in between cost 256 MiB). So a sandbox
// holds at most MaxSnapshots snapshots of distinct trees and
// MaxSnapshotBytes of them, and the running sandboxes together at most
// SnapshotStoreBytes; a snapshot over a quota is refused before anything
// is stored (its NAR is cut off at the bytes left).
//
// A snapshot lasts as long as the sandbox that took it: restore and fork
// need its tree while that sandbox runs. Once the sandbox has stopped
// (its record written), its snapshots that no other running sandbox took
// too, and that no restore or fork is reading, are collected: their refs
// removed (no restore or fork finds them) and their trees removed from
// the blob store, unless something else keeps the same blob (record.KeptMark: a
// record's output, file or log, a git ref). The record keeps each
// snapshot's id, its NAR hash; records verify checks a tree while the
// store has it. What a server killed with SIGKILL held is collected at
// the next start, and by agentsandbox gc (which leaves the snapshots of
// sandboxes that have a journal, running under a server, alone).

// Defaults of the snapshot quotas (Options).
const (
	DefaultMaxSnapshots       = 16
	DefaultMaxSnapshotBytes   = 4 << 30
	DefaultSnapshotStoreBytes = 32 << 30
)

// collectDelay gathers the snapshots of sandboxes that stop close
// together into one collection (each reads every record).
const collectDelay = 2 * time.Second

// snapshotState is the manager's part of snapshots.
type snapshotState struct {
	// mu is read-locked while a snapshot is taken (its NAR stored, its
	// ref written, its box told) and locked while the collector removes
	// refs and trees, so that a snapshot of a tree being collected is
	// either seen as held or taken after the tree is gone (and stored
	// anew).
	mu sync.RWMutex

	holdMu sync.Mutex
	holds  map[record.Digest]int // trees being restored or forked from
	taking map[*box]bool         // one snapshot of a sandbox at a time

	pendMu  sync.Mutex
	pending map[record.Digest]bool // trees of stopped sandboxes, to collect
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}

	mark record.KeptMark // the collector's, across collections
}

func (s *snapshotState) init() {
	s.holds = map[record.Digest]int{}
	s.taking = map[*box]bool{}
	s.pending = map[record.Digest]bool{}
	s.wake = make(chan struct{}, 1)
	s.stop = make(chan struct{})
	s.done = make(chan struct{})
}

// snapshotUse is what b's snapshots hold: how many distinct trees and
// their bytes; b.mu is held.
func (b *box) snapshotUse() (n int, bytes int64) {
	seen := map[string]bool{}
	for _, s := range b.snapshots {
		if !seen[s.ID] {
			seen[s.ID] = true
			n++
			bytes += s.Size
		}
	}
	return n, bytes
}

// snapshotQuota checks that b may take one more snapshot and returns how
// many bytes its NAR may have.
func (m *manager) snapshotQuota(b *box) (int64, error) {
	b.mu.Lock()
	n, used := b.snapshotUse()
	b.mu.Unlock()
	if n >= m.o.MaxSnapshots {
		return 0, Errorf(CodeLimit, "sandbox %s holds %d snapshots, the most one sandbox may (serve --max-snapshots): a snapshot lasts as long as its sandbox; fork a new sandbox from the latest to go on with a fresh quota", b.id, n)
	}
	left := int64(m.o.MaxSnapshotBytes) - used
	what := fmt.Sprintf("sandbox %s's snapshots hold %s of the %s one sandbox may (serve --max-snapshot-bytes)", b.id, workflow.FormatSize(used), workflow.FormatSize(m.o.MaxSnapshotBytes))
	if all := m.snapshotStoreUse(); int64(m.o.SnapshotStoreBytes)-all < left {
		left = int64(m.o.SnapshotStoreBytes) - all
		what = fmt.Sprintf("the running sandboxes' snapshots hold %s of the %s this server keeps (serve --snapshot-store-bytes)", workflow.FormatSize(all), workflow.FormatSize(m.o.SnapshotStoreBytes))
	}
	if left <= 0 {
		return 0, Errorf(CodeTooLarge, "snapshot: %s: no room for another", what)
	}
	return left, nil
}

// snapshotStoreUse is the bytes of the distinct trees the running
// sandboxes hold.
func (m *manager) snapshotStoreUse() int64 {
	var total int64
	for _, size := range m.liveTrees() {
		total += size
	}
	return total
}

// liveTrees are the trees the sandboxes not stopped hold, with their
// sizes.
func (m *manager) liveTrees() map[record.Digest]int64 {
	m.mu.Lock()
	bs := make([]*box, 0, len(m.boxes))
	for _, b := range m.boxes {
		bs = append(bs, b)
	}
	m.mu.Unlock()
	out := map[record.Digest]int64{}
	for _, b := range bs {
		if b.stopped() {
			continue
		}
		b.mu.Lock()
		for _, s := range b.snapshots {
			if d, err := record.ParseDigest(s.ID); err == nil {
				out[d] = s.Size
			}
		}
		b.mu.Unlock()
	}
	return out
}

// quotaWriter cuts a snapshot's NAR off once it passes left bytes.
type quotaWriter struct {
	w    io.Writer
	left int64
	err  error
}

func (q *quotaWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > q.left {
		return 0, q.err
	}
	q.left -= int64(len(p))
	return q.w.Write(p)
}

// startTaking marks a snapshot of b under way, or refuses a second one.
func (m *manager) startTaking(b *box) (func(), error) {
	m.snaps.holdMu.Lock()
	defer m.snaps.holdMu.Unlock()
	if m.snaps.taking[b] {
		return nil, Errorf(CodeConflict, "sandbox %s: a snapshot of it is being taken; wait for it", b.id)
	}
	m.snaps.taking[b] = true
	return func() {
		m.snaps.holdMu.Lock()
		delete(m.snaps.taking, b)
		m.snaps.holdMu.Unlock()
	}, nil
}

// holdTree keeps the snapshot snap ("sha256:<hex>") from being collected
// while it is restored or forked from; the returned function lets go.
func (m *manager) holdTree(snap string) func() {
	d, err := record.ParseDigest(snap)
	if err != nil {
		return func() {}
	}
	m.snaps.holdMu.Lock()
	m.snaps.holds[d]++
	m.snaps.holdMu.Unlock()
	return func() {
		m.snaps.holdMu.Lock()
		last := false
		if m.snaps.holds[d]--; m.snaps.holds[d] <= 0 {
			delete(m.snaps.holds, d)
			last = true
		}
		m.snaps.holdMu.Unlock()
		// A collection may have passed it over while it was held: it is
		// the collector's again unless a running sandbox holds it (whose
		// stop hands it over then).
		if _, live := m.liveTrees()[d]; last && !live {
			m.queueTrees([]record.Digest{d})
		}
	}
}

// held are the trees no collection may take now: the running sandboxes'
// and those being restored or forked from.
func (m *manager) held() map[record.Digest]bool {
	out := map[record.Digest]bool{}
	for d := range m.liveTrees() {
		out[d] = true
	}
	m.snaps.holdMu.Lock()
	for d := range m.snaps.holds {
		out[d] = true
	}
	m.snaps.holdMu.Unlock()
	return out
}

// releaseSnapshots hands the snapshots of b, which has stopped, to the
// collector.
func (m *manager) releaseSnapshots(b *box) {
	b.mu.Lock()
	var trees []record.Digest
	for _, s := range b.snapshots {
		if d, err := record.ParseDigest(s.ID); err == nil {
			trees = append(trees, d)
		}
	}
	b.mu.Unlock()
	m.queueTrees(trees)
}

// queueTrees hands trees to the collector.
func (m *manager) queueTrees(trees []record.Digest) {
	if len(trees) == 0 {
		return
	}
	m.snaps.pendMu.Lock()
	for _, d := range trees {
		m.snaps.pending[d] = true
	}
	m.snaps.pendMu.Unlock()
	select {
	case m.snaps.wake <- struct{}{}:
	default:
	}
}

// collector collects released snapshots in the background until Close;
// first everything a server killed before left.
func (m *manager) collector() {
	defer close(m.snaps.done)
	if removed, err := m.collect(nil); err != nil {
		m.o.Logf("collect the snapshots of sandboxes that ended with an earlier server: %v", err)
	} else if len(removed) > 0 {
		m.o.Logf("collected %d snapshots of sandboxes that ended with an earlier server", len(removed))
	}
	for {
		select {
		case <-m.snaps.stop:
			return
		case <-m.snaps.wake:
		}
		select {
		case <-m.snaps.stop:
			return
		case <-time.After(collectDelay):
		}
		if _, err := m.collectPending(); err != nil {
			m.o.Logf("collect snapshots: %v", err)
		}
	}
}

// collectPending collects the trees released so far.
func (m *manager) collectPending() ([]string, error) {
	m.snaps.pendMu.Lock()
	cands := m.snaps.pending
	m.snaps.pending = map[record.Digest]bool{}
	m.snaps.pendMu.Unlock()
	if len(cands) == 0 {
		return nil, nil
	}
	return m.collect(cands)
}

func (m *manager) collect(cands map[record.Digest]bool) ([]string, error) {
	return collectSnapshots(m.o.Engine.Store, &m.snaps.mark, &m.snaps.mu, m.held, cands)
}

// CollectSnapshots removes from store the snapshots no running sandbox
// holds, as a server does when their sandboxes stop: for agentsandbox gc.
// The snapshots of a sandbox that has a journal (it runs under a server,
// or its server was killed and has not started again) are left alone. It
// returns what it removed, one line each.
func CollectSnapshots(store *record.Store) ([]string, error) {
	return collectSnapshots(store, &record.KeptMark{}, nil, nil, nil)
}

// collectSnapshots collects cands (nil: every snapshot the store's refs
// name) that held (nil: none) and the journals do not hold: it removes
// their refs, then each tree that nothing else keeps (mark, updated
// here, and the journals' entries). lock, when set, is held while refs
// and trees are removed (snapshotState.mu).
func collectSnapshots(store *record.Store, mark *record.KeptMark, lock *sync.RWMutex, held func() map[record.Digest]bool, cands map[record.Digest]bool) ([]string, error) {
	var errs []error
	refs, err := snapshotRefs(store)
	if err != nil {
		return nil, err
	}
	if cands == nil {
		cands = map[record.Digest]bool{}
		for d := range refs {
			cands[d] = true
		}
	}
	if len(cands) == 0 {
		return nil, nil
	}
	// What the journals (running sandboxes) hold and keep, then what
	// records and other refs keep: read before the lock is taken, since
	// it reads every record.
	kept, trees := map[record.Digest]bool{}, map[record.Digest]bool{}
	if err := journalBlobs(store, kept, trees); err != nil {
		return nil, err
	}
	if err := mark.Update(store); err != nil {
		return nil, err
	}
	if lock != nil {
		lock.Lock()
		defer lock.Unlock()
	}
	if held != nil {
		for d := range held() {
			trees[d] = true
		}
	}
	// Refs written since they were listed (a snapshot of a tree again).
	if refs, err = snapshotRefs(store); err != nil {
		return nil, err
	}
	var removed []string
	for d := range cands {
		if trees[d] {
			continue
		}
		for _, kind := range refs[d] {
			if err := store.RemoveRef(kind, d.Hex()); err != nil {
				errs = append(errs, err)
			}
		}
		if kept[d] || mark.Keeps(d) {
			removed = append(removed, fmt.Sprintf("snapshot %s (its tree is kept: a record or ref names the same blob)", d))
			continue
		}
		size, err := store.RemoveBlob(d)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, fmt.Sprintf("snapshot %s (%s)", d, workflow.FormatSize(size)))
	}
	return removed, errors.Join(errs...)
}

// snapshotRefs lists the snapshot refs by tree: the kinds that name it.
func snapshotRefs(store *record.Store) (map[record.Digest][]string, error) {
	kinds, err := store.RefKinds()
	if err != nil {
		return nil, err
	}
	out := map[record.Digest][]string{}
	for _, kind := range kinds {
		if !record.SnapshotRefKind(kind) {
			continue
		}
		keys, err := store.RefKeys(kind)
		if err != nil {
			return nil, err
		}
		for _, key := range keys {
			d, err := record.ParseDigest("sha256:" + key)
			if err != nil {
				continue
			}
			out[d] = append(out[d], kind)
		}
	}
	return out, nil
}

// journalBlobs adds what the sandbox journals in store name: the blobs
// their entries keep to kept, their snapshots' trees to trees.
func journalBlobs(store *record.Store, kept, trees map[record.Digest]bool) error {
	dir := filepath.Join(store.Dir(), journalDir)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the sandbox journals: %w", err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".jsonl") || !e.Type().IsRegular() {
			continue
		}
		entries, err := journalEntries(filepath.Join(dir, e.Name()))
		if err != nil {
			return fmt.Errorf("read the sandbox journal %s: %w", e.Name(), err)
		}
		store.EntryBlobs(entries, kept, trees)
	}
	return nil
}

// journalEntries reads the entries of a journal (its lines after the
// first; a torn last line is left out).
func journalEntries(p string) ([]record.Entry, error) {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // its sandbox ended meanwhile
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxJournalLine)
	var out []record.Entry
	for n := 0; sc.Scan(); n++ {
		if n == 0 {
			continue
		}
		var e record.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			break
		}
		out = append(out, e)
	}
	return out, sc.Err()
}
