package sandboxes

import (
	"sync"

	"github.com/agentsandbox/agentsandbox/record"
)

// Stored content belongs to whoever may read a record that names it
// (record.Store.NamedBlobs): an identity owns the blobs of its own
// records (its killed sandboxes, its runs, after a restart too: records
// keep their owner, and the journal of a sandbox killed with the server
// does) and of its running sandboxes (their entries so far). An admin
// owns everything. This is what an API caller's inline workflow may be
// served from the store by its pin (inputs.Confinement.Owns).

// owned is who's Owns function over the store: the set is gathered on
// first use (once per run; it reads every record of the store) and
// holds what who owned then.
func (m *manager) owned(who Identity) func(record.Digest) bool {
	if who.Admin {
		return func(record.Digest) bool { return true }
	}
	if who.Name == "" { // an identity without a name owns nothing
		return func(record.Digest) bool { return false }
	}
	var (
		once sync.Once
		set  map[record.Digest]bool
	)
	return func(d record.Digest) bool {
		once.Do(func() { set = m.ownedBlobs(who.Name) })
		return set[d]
	}
}

// ownedBlobs gathers the blobs owner's records and running sandboxes
// name. A record that cannot be read adds nothing.
func (m *manager) ownedBlobs(owner string) map[record.Digest]bool {
	store := m.o.Engine.Store
	set := map[record.Digest]bool{}
	if list, err := store.List(); err == nil {
		for _, s := range list {
			if s.Owner != owner || s.Problem != "" {
				continue
			}
			if r, err := store.Get(s.ID); err == nil {
				store.NamedBlobs(r, set)
			}
		}
	}
	m.mu.Lock()
	var bs []*box
	for _, b := range m.boxes {
		if b.owner == owner {
			bs = append(bs, b)
		}
	}
	m.mu.Unlock()
	// A running sandbox's entries (its record is not written yet).
	for _, b := range bs {
		b.mu.Lock()
		entries := append([]record.Entry(nil), b.entries...)
		b.mu.Unlock()
		store.NamedBlobs(&record.Record{Sandbox: &record.Sandbox{Entries: entries}}, set)
	}
	return set
}
