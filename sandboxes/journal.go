package sandboxes

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentsandbox/agentsandbox/record"
)

// A server killed with SIGKILL (or crashing) takes its sandboxes with it:
// their agents have a parent-death signal, and the next start removes
// what they held on the host (hoststate.GC). What would be lost is their
// records: the entries' blobs are in the store, but the record naming
// them is written at kill. So each running sandbox keeps a journal in
// STATE-DIR/sandboxes/ID.jsonl: its first line is the record as it would
// be if the sandbox ended then (engine.Sandbox.Draft), and each later
// line one entry, appended as it happens. A sandbox closed normally
// removes its journal after its record is written; a new manager closes
// the record of every journal it finds (Ended "server killed") and
// removes the journal. A torn last line (the crash came mid-write) is
// left out.

const journalDir = "sandboxes"

// maxJournalLine bounds one line of a journal read back.
const maxJournalLine = 16 << 20

func (m *manager) journalPath(id string) string {
	return filepath.Join(m.o.Engine.Store.Dir(), journalDir, id+".jsonl")
}

// openJournal starts b's journal with its draft record; b.mu is held.
func (m *manager) openJournal(b *box) error {
	d := b.sb.Draft()
	d.Sandbox.Labels = b.labels
	draft, err := json.Marshal(d)
	if err != nil {
		return err
	}
	p := m.journalPath(b.id)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(draft, '\n')); err != nil {
		f.Close()
		return err
	}
	b.journal = f
	return nil
}

// journalEntry appends e to b's journal; b.mu is held. A failure is
// reported, not fatal: the record at kill does not need the journal.
func (b *box) journalEntry(e record.Entry) {
	if b.journal == nil {
		return
	}
	line, err := json.Marshal(e)
	if err == nil {
		_, err = b.journal.Write(append(line, '\n'))
	}
	if err != nil {
		b.m.o.Logf("sandbox %s: journal an entry: %v", b.id, err)
	}
}

// closeJournal removes b's journal once its record is written.
func (b *box) closeJournal() {
	b.mu.Lock()
	f := b.journal
	b.journal = nil
	b.mu.Unlock()
	if f == nil {
		return
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		b.m.o.Logf("sandbox %s: remove its journal: %v", b.id, err)
	}
}

// recoverJournals closes the record of every sandbox a killed server
// left a journal of, and returns those records' ids by sandbox.
func (m *manager) recoverJournals() (map[string]record.ID, error) {
	dir := filepath.Join(m.o.Engine.Store.Dir(), journalDir)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the sandbox journals: %w", err)
	}
	out := map[string]record.ID{}
	var errs []error
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".jsonl")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		rid, err := m.recoverJournal(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("sandbox %s: close the record a killed server left open (%s): %w", id, p, err))
			continue
		}
		out[id] = rid
		if err := os.Remove(p); err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

func (m *manager) recoverJournal(p string) (record.ID, error) {
	f, err := os.Open(p)
	if err != nil {
		return record.ID{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return record.ID{}, err
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxJournalLine)
	var rec *record.Record
	finished := fi.ModTime().UTC()
	for n := 0; sc.Scan(); n++ {
		if n == 0 {
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec == nil || rec.Sandbox == nil || len(rec.Steps) != 1 {
				return record.ID{}, fmt.Errorf("its first line is not a sandbox's draft record: %v", err)
			}
			continue
		}
		var e record.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			break // a torn last line: the crash came while it was written
		}
		rec.Sandbox.Entries = append(rec.Sandbox.Entries, e)
	}
	if rec == nil {
		return record.ID{}, errors.New("it is empty")
	}
	if finished.Before(rec.Started) {
		finished = rec.Started
	}
	rec.Finished = finished
	rec.Steps[0].Finished = finished
	if rec.Steps[0].Started.IsZero() {
		rec.Steps[0].Started = rec.Started
	}
	return m.o.Engine.Store.Put(rec)
}
