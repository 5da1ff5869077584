package record

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/agentsandbox/agentsandbox/fsx/atomicfile"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nix-community/go-nix/pkg/nixbase32"
)

// Errors callers can test for with errors.Is.
var (
	ErrNotFound     = errors.New("no such record")
	ErrAmbiguous    = errors.New("ambiguous record id prefix")
	ErrHashMismatch = errors.New("hash mismatch")
	ErrBlobMissing  = errors.New("blob missing")
)

// Store is a state directory holding records and blobs:
//
//	DIR/records/<id>.json     canonical record bytes; <id> is their sha256 in Nix base32
//	DIR/blobs/<hh>/<hex>      blob bytes; <hex> is their sha256, <hh> its first two digits
//	DIR/refs/<kind>/<key>     a Digest.String() and a newline (git commit -> NAR of its tree)
//	DIR/tmp/                  staging for fetches and writes in progress
//
// Every file is written to a temp file in the directory it lands in (names
// starting with ".tmp-") and renamed into place; readers ignore temp files.
// Blobs are not synced one by one: Put (and PutRef) first make every blob
// written since the last sync durable with one syncfs(2), then write the
// record (temp file, that syncfs or an fsync, rename, directory fsync). So
// a durable record only names durable blobs, and a crash can leave at worst
// a torn blob that no record names. Dedup re-hashes a present blob before
// keeping it and replaces one that does not match; readers verify on read.
//
// Blobs hold job output (logs, outputs), which may be secret: every
// directory is 0700 and every blob 0400, so only the store's owner reads
// them. OpenStore tightens the directories of a store made with looser
// modes by an older version; blobs already stored keep their mode but sit
// beneath the 0700 top directory.
type Store struct {
	dir string

	// afterTempWrite, when set (tests), runs after a record's temp file is
	// written and synced and before it is renamed into place.
	afterTempWrite func()

	// dirty is set when a blob may not be durable yet (see Sync).
	dirty atomic.Bool
}

const tmpPrefix = atomicfile.TempPrefix

// DefaultStateDir is $XDG_STATE_HOME/agentsandbox, else
// ~/.local/state/agentsandbox; for root it is /var/lib/agentsandbox.
func DefaultStateDir() (string, error) {
	if os.Geteuid() == 0 {
		return "/var/lib/agentsandbox", nil
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "agentsandbox"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find state directory: %w; pass --state-dir", err)
	}
	return filepath.Join(home, ".local", "state", "agentsandbox"), nil
}

// OpenStore opens (creating as needed) the store rooted at dir.
func OpenStore(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("open store: empty state directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, DirMode); err != nil {
		return nil, fmt.Errorf("open store %s: %w", abs, err)
	}
	if fi, err := os.Stat(abs); err == nil && fi.Mode()&fs.ModeSticky != 0 {
		return nil, fmt.Errorf("open store %s: a shared directory (sticky bit, like /tmp) cannot hold job output privately: use a directory of its own, such as %s", abs, filepath.Join(abs, "agentsandbox"))
	}
	for _, sub := range []string{"records", "blobs", "refs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(abs, sub), DirMode); err != nil {
			return nil, fmt.Errorf("open store %s: %w", abs, err)
		}
	}
	// MkdirAll keeps the mode of directories that exist: tighten a store
	// made before its directories were private.
	for _, d := range []string{"", "records", "blobs", "refs", "tmp"} {
		if err := tighten(filepath.Join(abs, d)); err != nil {
			return nil, fmt.Errorf("open store %s: %w", abs, err)
		}
	}
	return &Store{dir: abs}, nil
}

// DirMode and BlobMode are the modes of the store's directories and blobs:
// job output is readable by the store's owner only.
const (
	DirMode  fs.FileMode = 0o700
	BlobMode fs.FileMode = 0o400
)

// tighten makes dir DirMode if it grants anything to group or others.
func tighten(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(dir, DirMode); err != nil {
		return fmt.Errorf("make %s private: %w", dir, err)
	}
	return nil
}

// Dir returns the store's root directory.
func (s *Store) Dir() string { return s.dir }

// RecordPath returns where the record id is (or would be) stored.
func (s *Store) RecordPath(id ID) string {
	return filepath.Join(s.dir, "records", id.String()+".json")
}

// Put encodes r canonically and stores it; storing the same record twice is
// a no-op. It returns the record's ID.
func (s *Store) Put(r *Record) (ID, error) {
	b, err := Encode(r)
	if err != nil {
		return ID{}, fmt.Errorf("put record: %w", err)
	}
	id := IDOf(b)
	path := s.RecordPath(id)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		// Present and intact (a damaged copy is rewritten below), but
		// perhaps not yet durable, and the blobs it names must be.
		if err := s.Sync(); err != nil {
			return ID{}, fmt.Errorf("put record %s: %w", id, err)
		}
		return id, nil
	}
	// One syncfs makes the blobs this record names and the record's own
	// bytes durable before its name appears; without pending blobs a plain
	// fsync of the record will do.
	syncFS := s.dirty.Swap(false)
	if err := atomicfile.Write(path, b, 0o444, atomicfile.Options{SyncFS: syncFS, BeforeRename: s.afterTempWrite}); err != nil {
		if syncFS {
			s.dirty.Store(true)
		}
		return ID{}, fmt.Errorf("put record %s: %w", id, err)
	}
	return id, nil
}

// Get reads the record id and checks that its bytes still hash to id.
func (s *Store) Get(id ID) (*Record, error) {
	b, err := s.readRecord(id)
	if err != nil {
		return nil, err
	}
	r, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("read record %s: %w", id, err)
	}
	return r, nil
}

// GetRaw returns the stored canonical bytes of record id, verified like Get.
func (s *Store) GetRaw(id ID) ([]byte, error) { return s.readRecord(id) }

func (s *Store) readRecord(id ID) ([]byte, error) {
	path := s.RecordPath(id)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read record %s: %w (looked in %s)", id, ErrNotFound, filepath.Dir(path))
	}
	if err != nil {
		return nil, fmt.Errorf("read record %s: %w", id, err)
	}
	if got := IDOf(b); got != id {
		return nil, fmt.Errorf("read record %s: %w: %s hashes to %s; the file was changed after it was written", id, ErrHashMismatch, path, got)
	}
	return b, nil
}

// Resolve expands a unique prefix of a record id, like git does for commits.
func (s *Store) Resolve(prefix string) (ID, error) { return s.ResolveAmong(prefix, nil) }

// ResolveAmong is Resolve among the records keep accepts (nil: all); keep
// is asked only about ids with the prefix. The others are not mentioned,
// not even as candidates of an ambiguous prefix.
func (s *Store) ResolveAmong(prefix string, keep func(ID) bool) (ID, error) {
	if prefix == "" {
		return ID{}, errors.New("resolve record id: empty id")
	}
	for i := 0; i < len(prefix); i++ {
		if !nixbase32.Is(prefix[i]) {
			return ID{}, fmt.Errorf("resolve record id %q: %q is not a Nix base32 character (0-9 a-z without e o u t)", prefix, prefix[i])
		}
	}
	if len(prefix) > idLen {
		return ID{}, fmt.Errorf("resolve record id %q: longer than %d characters", prefix, idLen)
	}
	ids, err := s.ids()
	if err != nil {
		return ID{}, err
	}
	var found []ID
	for _, id := range ids {
		if strings.HasPrefix(id.String(), prefix) && (keep == nil || keep(id)) {
			found = append(found, id)
		}
	}
	switch len(found) {
	case 0:
		return ID{}, fmt.Errorf("resolve record id %q: %w; `agentsandbox records list` shows the ids", prefix, ErrNotFound)
	case 1:
		return found[0], nil
	}
	names := make([]string, 0, len(found))
	for _, id := range found {
		names = append(names, id.String())
	}
	slices.Sort(names)
	return ID{}, fmt.Errorf("resolve record id %q: %w: matches %s; give more characters", prefix, ErrAmbiguous, strings.Join(names, ", "))
}

// ids lists the ids of stored records, ignoring temp and foreign files.
func (s *Store) ids() ([]ID, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, "records"))
	if err != nil {
		return nil, fmt.Errorf("list records: %w", err)
	}
	var ids []ID
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(name, ".") || !e.Type().IsRegular() {
			continue
		}
		id, err := ParseID(name)
		if err != nil {
			continue
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// Summary is one line of List.
type Summary struct {
	ID       ID
	Workflow string
	Status   Status
	Started  time.Time
	Duration time.Duration
	// Owner is the record's owner (Record.Owner).
	Owner string
	// Problem is set, and the other fields but ID are empty, when the
	// record could not be read (for example a hash mismatch).
	Problem string
}

// List summarises every record, newest first (by start time, then id).
// A record that fails to read is listed with its Problem, not dropped.
func (s *Store) List() ([]Summary, error) {
	ids, err := s.ids()
	if err != nil {
		return nil, err
	}
	out := make([]Summary, 0, len(ids))
	for _, id := range ids {
		r, err := s.Get(id)
		if err != nil {
			out = append(out, Summary{ID: id, Problem: err.Error()})
			continue
		}
		out = append(out, Summary{
			ID: id, Workflow: r.Workflow.Name, Status: r.Status,
			Started: r.Started, Duration: r.Duration(), Owner: r.Owner,
		})
	}
	slices.SortFunc(out, func(a, b Summary) int {
		if c := b.Started.Compare(a.Started); c != 0 {
			return c
		}
		return bytes.Compare(a.ID[:], b.ID[:])
	})
	return out, nil
}

// TempDir makes a new directory under DIR/tmp, on the same file system as
// the blobs, for staging a fetch. The caller removes it.
func (s *Store) TempDir(pattern string) (string, error) {
	d, err := os.MkdirTemp(filepath.Join(s.dir, "tmp"), pattern)
	if err != nil {
		return "", fmt.Errorf("make staging directory: %w", err)
	}
	return d, nil
}
