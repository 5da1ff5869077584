package record

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Snapshot trees are the one kind of content the store does not keep for
// ever. A long-lived sandbox's snapshot is the NAR of its workspace, as a
// blob named by a ref of kind "snapshot" (and "snapshot.<owner>"); its
// record's snapshot and restore entries name that NAR in their action's
// file. The record keeps the tree's hash, which says what the workspace
// was; the tree itself is kept while a running sandbox may restore or fork
// from it, and collected after (package sandboxes decides when). Every
// other blob a record or ref names is kept (KeptMark), so that
// a collected tree that is also something else (a step's output NAR, a
// file put whose bytes are that NAR, a git tree) stays.

// SnapshotTree reports whether the file an entry of kind names is a
// snapshot's tree (kinds "snapshot" and "restore") rather than content the
// record keeps.
func SnapshotTree(kind string) bool { return kind == "snapshot" || kind == "restore" }

// SnapshotRefKind reports whether refs of kind name snapshot trees:
// "snapshot", and "snapshot.<name>" (a snapshot's owner).
func SnapshotRefKind(kind string) bool {
	return kind == "snapshot" || strings.HasPrefix(kind, "snapshot.")
}

// refBlobs adds what the refs that are not snapshots' name.
func (s *Store) refBlobs(set map[Digest]bool) error {
	kinds, err := s.RefKinds()
	if err != nil {
		return err
	}
	for _, kind := range kinds {
		if SnapshotRefKind(kind) {
			continue
		}
		keys, err := s.RefKeys(kind)
		if err != nil {
			return err
		}
		for _, key := range keys {
			if d, _, err := s.Ref(kind, key); err == nil && !d.IsZero() {
				set[d] = true
			}
		}
	}
	return nil
}

// KeptMark is what the store keeps for its records and refs: what each
// record names (its workflow, lock, inputs, job specs, logs, outputs,
// network and decision logs, a sandbox's entries and the blobs their
// actions name), except snapshot trees, and what every ref names that is
// not a snapshot's. A record never changes, so each is read once, by the
// first Update after it is written, and what it keeps is remembered by
// the first 8 bytes of each digest (a blob that shares them with a kept
// one is kept too, never the other way round): a server collecting
// snapshots again and again reads only the new records. Refs are read at
// every Update. A record that cannot be read adds nothing (it is tried
// again); an entry whose action cannot be read adds its own digest. Not
// safe for concurrent use.
type KeptMark struct {
	seen    map[ID]bool
	records map[uint64]bool
	refs    map[Digest]bool
}

// Update reads the records written since the last Update, and the refs.
func (m *KeptMark) Update(s *Store) error {
	if m.seen == nil {
		m.seen, m.records = map[ID]bool{}, map[uint64]bool{}
	}
	ids, err := s.ids()
	if err != nil {
		return err
	}
	for _, id := range ids {
		if m.seen[id] {
			continue
		}
		r, err := s.Get(id)
		if err != nil {
			continue // a record being written is read at the next Update
		}
		m.seen[id] = true
		set := map[Digest]bool{}
		s.recordBlobs(r, set)
		for d := range set {
			m.records[digestKey(d)] = true
		}
	}
	m.refs = map[Digest]bool{}
	return s.refBlobs(m.refs)
}

// Keeps reports whether a record or ref read by the last Update keeps d.
func (m *KeptMark) Keeps(d Digest) bool { return m.refs[d] || m.records[digestKey(d)] }

func digestKey(d Digest) uint64 {
	var k uint64
	for _, b := range d[:8] {
		k = k<<8 | uint64(b)
	}
	return k
}

func (s *Store) recordBlobs(r *Record, set map[Digest]bool) {
	add := func(d Digest) {
		if !d.IsZero() {
			set[d] = true
		}
	}
	add(r.Workflow.FileDigest)
	if r.Workflow.Lock != nil {
		add(*r.Workflow.Lock)
	}
	for _, in := range r.Inputs {
		add(in.Digest)
	}
	for _, st := range r.Steps {
		add(st.JobDigest)
		for _, d := range st.Inputs {
			add(d)
		}
		add(st.Logs.Stdout)
		add(st.Logs.Stderr)
		if st.Logs.Console != nil {
			add(*st.Logs.Console)
		}
		for _, o := range st.Outputs {
			add(o.NarHash.Blob())
		}
		if st.Network != nil {
			add(st.Network.Log)
		}
	}
	if r.Policy != nil && r.Policy.DecisionLog != nil {
		add(*r.Policy.DecisionLog)
	}
	if r.Sandbox != nil {
		s.EntryBlobs(r.Sandbox.Entries, set, nil)
	}
}

// EntryBlobs adds to kept the blobs a sandbox's entries keep: each entry's
// action blob and the blobs the action names, but not a snapshot's or a
// restore's tree. The trees of the sandbox's own snapshots go to trees
// (when not nil): what a running sandbox's journal holds.
func (s *Store) EntryBlobs(entries []Entry, kept, trees map[Digest]bool) {
	for _, e := range entries {
		if e.Digest.IsZero() {
			continue
		}
		kept[e.Digest] = true
		a, err := s.Action(e.Digest)
		if err != nil {
			continue
		}
		for name, d := range a.Blobs() {
			switch {
			case name == "file" && SnapshotTree(e.Kind):
				if trees != nil && e.Kind == "snapshot" {
					trees[d] = true
				}
			default:
				kept[d] = true
			}
		}
	}
}

// RefKinds lists the kinds of refs the store holds, sorted.
func (s *Store) RefKinds() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, "refs"))
	if err != nil {
		return nil, fmt.Errorf("list refs: %w", err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && refName.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// RefKeys lists the keys of kind's refs, sorted.
func (s *Store) RefKeys(kind string) ([]string, error) {
	if !refName.MatchString(kind) {
		return nil, fmt.Errorf("ref kind %q: names are lowercase letters, digits, '.', '_' and '-'", kind)
	}
	ents, err := os.ReadDir(filepath.Join(s.dir, "refs", kind))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list refs %s: %w", kind, err)
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && refName.MatchString(e.Name()) && !strings.HasPrefix(e.Name(), tmpPrefix) {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out, nil
}

// RemoveRef removes key of kind; one that is not there is no error.
func (s *Store) RemoveRef(kind, key string) error {
	path, err := s.refPath(kind, key)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove ref %s/%s: %w", kind, key, err)
	}
	return nil
}

// RemoveBlob removes blob d and returns its size; one that is not there
// is no error (size 0). The caller makes sure nothing keeps it
// (KeptMark).
func (s *Store) RemoveBlob(d Digest) (int64, error) {
	path := s.BlobPath(d)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("remove blob %s: %w", d, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("remove blob %s: %w", d, err)
	}
	return fi.Size(), nil
}
