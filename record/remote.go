package record

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/nix-community/go-nix/pkg/nixbase32"
)

// Remote is a shared store of records, blobs and refs that several state
// directories push to and pull from: an S3 bucket (package s3store) or a
// directory (DirRemote). Its keys are the local store's names:
//
//	records/<id>.json   blobs/<hh>/<hex>   refs/<kind>/<key>
//
// Objects under records/ and blobs/ are immutable and named by their
// content's sha256: Put is idempotent (an object already there is kept)
// and readers verify what they get (Pull). Refs are the only objects that
// change, and only by compare-and-swap (SwapRef).
type Remote interface {
	// Has reports whether key is stored. It does not verify the content.
	Has(ctx context.Context, key string) (bool, error)
	// Put stores size bytes of body under key unless key is already
	// stored; sum is the bytes' sha256, which the remote checks. stored is
	// false when the key was already there (the body is then not kept).
	Put(ctx context.Context, key string, body io.Reader, size int64, sum Digest) (stored bool, err error)
	// Get opens key; an error wrapping ErrRemoteMissing when it is not
	// stored. The caller verifies the bytes.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns the keys that start with prefix, sorted.
	List(ctx context.Context, prefix string) ([]string, error)
	// GetRef returns the value of ref key and its version (an ETag);
	// version is "" and value nil when the ref does not exist.
	GetRef(ctx context.Context, key string) (value []byte, version string, err error)
	// SwapRef sets ref key to value if its version is still old ("": if
	// it does not exist), and returns the new version; an error wrapping
	// ErrRefChanged when another writer got there first.
	SwapRef(ctx context.Context, key string, value []byte, old string) (version string, err error)
	// String names the remote in messages (its URL, without secrets).
	String() string
}

// Errors of a Remote, for errors.Is.
var (
	ErrRemoteMissing = errors.New("not in the shared store")
	ErrRefChanged    = errors.New("ref changed since it was read")
)

// RecordKey, BlobKey and RefKey are the keys of a record, a blob and a ref
// in a Remote: the local store's paths beneath its directory.
func RecordKey(id ID) string { return "records/" + id.String() + ".json" }

// BlobKey is the key of blob d (see RecordKey).
func BlobKey(d Digest) string { h := d.Hex(); return "blobs/" + h[:2] + "/" + h }

// RefKey is the key of a ref (see RecordKey and Store.PutRef).
func RefKey(kind, key string) (string, error) {
	if !refName.MatchString(kind) || !refName.MatchString(key) {
		return "", fmt.Errorf("ref %q/%q: names are lowercase letters, digits, '.', '_' and '-'", kind, key)
	}
	return "refs/" + kind + "/" + key, nil
}

// maxRecordBytes bounds a record read from a remote.
const maxRecordBytes = 64 << 20

// pushWorkers is how many blobs Push and Pull move at once.
const pushWorkers = 8

// Transfer counts what Push or Pull moved.
type Transfer struct {
	Blobs   int   // blobs the record names
	Sent    int   // blobs copied (the others were there already)
	Bytes   int64 // bytes of the blobs copied
	Record  bool  // whether the record itself was copied
	Already bool  // the record was there already (nothing was copied)
}

// Push copies record id from s to rm with every blob it names: the blobs
// first, the record last, so the remote never holds a record that names a
// blob it lacks (a push cut short leaves at most blobs no record names,
// which the next push completes). A blob the record names that s does not
// hold fails the push before the record is sent.
func Push(ctx context.Context, s *Store, rm Remote, id ID) (Transfer, error) {
	var t Transfer
	raw, err := s.GetRaw(id)
	if err != nil {
		return t, fmt.Errorf("push record %s: %w", id, err)
	}
	r, err := Decode(raw)
	if err != nil {
		return t, fmt.Errorf("push record %s: %w", id, err)
	}
	set := map[Digest]bool{}
	s.NamedBlobs(r, set)
	blobs := sortedDigests(set)
	t.Blobs = len(blobs)
	for _, d := range blobs {
		if !s.HasBlob(d) {
			return t, fmt.Errorf("push record %s: it names blob %s, which is %w; nothing was pushed for it: `agentsandbox records verify %s` names what is missing", id, d, ErrBlobMissing, id)
		}
	}
	var mu sync.Mutex
	err = parallel(ctx, blobs, func(ctx context.Context, d Digest) error {
		n, sent, err := pushBlob(ctx, s, rm, d)
		if err != nil {
			return err
		}
		if sent {
			mu.Lock()
			t.Sent++
			t.Bytes += n
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return t, fmt.Errorf("push record %s to %s: %w (the record was not pushed; nothing local changed)", id, rm, err)
	}
	stored, err := rm.Put(ctx, RecordKey(id), strings.NewReader(string(raw)), int64(len(raw)), Digest(id))
	if err != nil {
		return t, fmt.Errorf("push record %s to %s: its blobs are there, the record is not: %w", id, rm, err)
	}
	t.Record, t.Already = stored, !stored && t.Sent == 0
	return t, nil
}

// pushBlob sends blob d unless rm has it; it returns its size and whether
// it was sent.
func pushBlob(ctx context.Context, s *Store, rm Remote, d Digest) (int64, bool, error) {
	key := BlobKey(d)
	if ok, err := rm.Has(ctx, key); err != nil {
		return 0, false, err
	} else if ok {
		return 0, false, nil
	}
	f, size, err := s.openBlobFile(d)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	// The remote checks the bytes against d (the sha256 it is sent), so
	// a local blob damaged since it was written is refused there.
	stored, err := rm.Put(ctx, key, f, size, d)
	if err != nil {
		return 0, false, fmt.Errorf("blob %s: %w", d, err)
	}
	return size, stored, nil
}

// Pull copies record id from rm into s with every blob it names that s
// lacks, verifying each by its hash: the blobs first (synced), the record
// last, so the local store keeps its rule that a record only names blobs
// it holds. A record already in s is left as it is.
func Pull(ctx context.Context, s *Store, rm Remote, id ID) (Transfer, error) {
	var t Transfer
	if _, err := s.GetRaw(id); err == nil {
		t.Already = true
		return t, nil
	} else if !errors.Is(err, ErrNotFound) {
		return t, fmt.Errorf("pull record %s: %w", id, err)
	}
	raw, err := getRecord(ctx, rm, id)
	if err != nil {
		return t, fmt.Errorf("pull record %s from %s: %w", id, rm, err)
	}
	r, err := Decode(raw)
	if err != nil {
		return t, fmt.Errorf("pull record %s from %s: %w", id, rm, err)
	}
	var mu sync.Mutex
	fetch := func(ctx context.Context, d Digest) error {
		if s.HasBlob(d) {
			return nil
		}
		n, err := pullBlob(ctx, s, rm, d)
		if err != nil {
			return err
		}
		mu.Lock()
		t.Sent++
		t.Bytes += n
		mu.Unlock()
		return nil
	}
	// A sandbox's entries are actions that name more blobs: fetch them
	// first so NamedBlobs can read them.
	if r.Sandbox != nil {
		entries := map[Digest]bool{}
		for _, e := range r.Sandbox.Entries {
			entries[e.Digest] = true
		}
		if err := parallel(ctx, sortedDigests(entries), fetch); err != nil {
			return t, fmt.Errorf("pull record %s from %s: %w (the record was not stored)", id, rm, err)
		}
	}
	set := map[Digest]bool{}
	s.NamedBlobs(r, set)
	blobs := sortedDigests(set)
	t.Blobs = len(blobs)
	if err := parallel(ctx, blobs, fetch); err != nil {
		return t, fmt.Errorf("pull record %s from %s: %w (the record was not stored)", id, rm, err)
	}
	if err := s.Sync(); err != nil {
		return t, fmt.Errorf("pull record %s: %w", id, err)
	}
	got, err := s.Put(r)
	if err != nil {
		return t, fmt.Errorf("pull record %s: %w", id, err)
	}
	if got != id {
		return t, fmt.Errorf("pull record %s: it re-encodes as %s (a record written by another version of agentsandbox?); not kept", id, got)
	}
	t.Record = true
	return t, nil
}

func getRecord(ctx context.Context, rm Remote, id ID) ([]byte, error) {
	rc, err := rm.Get(ctx, RecordKey(id))
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	raw, err := io.ReadAll(io.LimitReader(rc, maxRecordBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read record: %w", err)
	}
	if len(raw) > maxRecordBytes {
		return nil, fmt.Errorf("record is larger than %d bytes", maxRecordBytes)
	}
	if got := IDOf(raw); got != id {
		return nil, fmt.Errorf("%w: the object %s hashes to %s; it was changed in the shared store, and is not used", ErrHashMismatch, RecordKey(id), got)
	}
	return raw, nil
}

// pullBlob copies blob d from rm into s, refusing bytes that do not hash
// to d; it returns the blob's size.
func pullBlob(ctx context.Context, s *Store, rm Remote, d Digest) (int64, error) {
	rc, err := rm.Get(ctx, BlobKey(d))
	if err != nil {
		return 0, fmt.Errorf("blob %s: %w", d, err)
	}
	defer rc.Close()
	w, err := s.NewBlobWriter()
	if err != nil {
		return 0, err
	}
	if _, err := io.Copy(w, rc); err != nil {
		w.Abort()
		return 0, fmt.Errorf("blob %s: %w", d, err)
	}
	var got Digest
	w.h.Sum(got[:0])
	if got != d {
		w.Abort()
		return 0, fmt.Errorf("blob %s: %w: the object %s hashes to %s; it was changed in the shared store, and is not used", d, ErrHashMismatch, BlobKey(d), got)
	}
	_, n, err := w.Commit()
	return n, err
}

// ResolveRemote expands a unique prefix of a record id among the records
// in rm, like Store.Resolve does among local ones.
func ResolveRemote(ctx context.Context, rm Remote, prefix string) (ID, error) {
	if err := checkPrefix(prefix); err != nil {
		return ID{}, err
	}
	keys, err := rm.List(ctx, "records/"+prefix)
	if err != nil {
		return ID{}, fmt.Errorf("resolve record id %q in %s: %w", prefix, rm, err)
	}
	var found []string
	for _, k := range keys {
		name, ok := strings.CutSuffix(strings.TrimPrefix(k, "records/"), ".json")
		if _, err := ParseID(name); ok && err == nil {
			found = append(found, name)
		}
	}
	switch len(found) {
	case 0:
		return ID{}, fmt.Errorf("resolve record id %q: %w, neither here nor in %s", prefix, ErrNotFound, rm)
	case 1:
		return ParseID(found[0])
	}
	return ID{}, fmt.Errorf("resolve record id %q in %s: %w: matches %s; give more characters", prefix, rm, ErrAmbiguous, strings.Join(found, ", "))
}

func checkPrefix(prefix string) error {
	if prefix == "" {
		return errors.New("resolve record id: empty id")
	}
	for i := 0; i < len(prefix); i++ {
		if !nixbase32.Is(prefix[i]) {
			return fmt.Errorf("resolve record id %q: %q is not a Nix base32 character (0-9 a-z without e o u t)", prefix, prefix[i])
		}
	}
	if len(prefix) > idLen {
		return fmt.Errorf("resolve record id %q: longer than %d characters", prefix, idLen)
	}
	return nil
}

// PushRef sends ref kind/key of s, and the blob it names first, to rm. A
// ref rm has with another value is replaced only if nobody changed it
// between the read and the write (compare-and-swap); a lost race is
// retried a few times, then reported.
func PushRef(ctx context.Context, s *Store, rm Remote, kind, key string) error {
	d, ok, err := s.Ref(kind, key)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("push ref %s/%s: %w here", kind, key, ErrNotFound)
	}
	rk, err := RefKey(kind, key)
	if err != nil {
		return err
	}
	if _, _, err := pushBlob(ctx, s, rm, d); err != nil {
		return fmt.Errorf("push ref %s/%s to %s: %w", kind, key, rm, err)
	}
	want := []byte(d.String() + "\n")
	for try := 0; ; try++ {
		val, ver, err := rm.GetRef(ctx, rk)
		if err != nil {
			return fmt.Errorf("push ref %s/%s to %s: %w", kind, key, rm, err)
		}
		if string(val) == string(want) {
			return nil
		}
		_, err = rm.SwapRef(ctx, rk, want, ver)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrRefChanged) || try == 4 {
			return fmt.Errorf("push ref %s/%s to %s: %w", kind, key, rm, err)
		}
	}
}

// PullRef reads ref kind/key from rm, fetches (and verifies) the blob it
// names, and stores the ref in s. ok is false when rm has no such ref.
func PullRef(ctx context.Context, s *Store, rm Remote, kind, key string) (d Digest, ok bool, err error) {
	rk, err := RefKey(kind, key)
	if err != nil {
		return d, false, err
	}
	val, ver, err := rm.GetRef(ctx, rk)
	if err != nil {
		return d, false, fmt.Errorf("pull ref %s/%s from %s: %w", kind, key, rm, err)
	}
	if ver == "" {
		return d, false, nil
	}
	d, err = ParseDigest(strings.TrimSpace(string(val)))
	if err != nil {
		return d, false, fmt.Errorf("pull ref %s/%s from %s: %w", kind, key, rm, err)
	}
	if !s.HasBlob(d) {
		if _, err := pullBlob(ctx, s, rm, d); err != nil {
			return d, false, fmt.Errorf("pull ref %s/%s from %s: %w", kind, key, rm, err)
		}
	}
	if err := s.PutRef(kind, key, d); err != nil {
		return d, false, err
	}
	return d, true, nil
}

func sortedDigests(set map[Digest]bool) []Digest {
	out := make([]Digest, 0, len(set))
	for d := range set {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b Digest) int { return strings.Compare(a.Hex(), b.Hex()) })
	return out
}

// parallel runs f on each digest, pushWorkers at a time, and returns the
// first error (the others stop at their next digest).
func parallel(ctx context.Context, ds []Digest, f func(context.Context, Digest) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan Digest)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range min(pushWorkers, len(ds)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range work {
				if err := f(ctx, d); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
feed:
	for _, d := range ds {
		select {
		case work <- d:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}
