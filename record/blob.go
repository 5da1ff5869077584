package record

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"github.com/agentsandbox/agentsandbox/fsx/atomicfile"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/nix-community/go-nix/pkg/nar"
)

// BlobPath returns where blob d is (or would be) stored.
func (s *Store) BlobPath(d Digest) string {
	h := d.Hex()
	return filepath.Join(s.dir, "blobs", h[:2], h)
}

// HasBlob reports whether blob d is present. It does not re-hash it.
func (s *Store) HasBlob(d Digest) bool {
	fi, err := os.Stat(s.BlobPath(d))
	return err == nil && fi.Mode().IsRegular()
}

// PutBlob streams r into the store, hashing as it writes, and returns the
// blob's digest and size. A blob already present is kept and the new copy
// dropped, so identical content is stored once, but only after the present
// copy is re-hashed: a file at a digest's name that does not hash to it (a
// crash after the rename and before the bytes reached the disk, or damage)
// is replaced, never trusted.
//
// PutBlob does not fsync: the blob's bytes become durable at the next Sync
// (or Put of a record, which syncs first), in one syncfs(2) for every blob
// written since. Until then a crash can leave a torn file under the digest
// name; nothing durable names it yet, readers verify (OpenBlob) and the next
// PutBlob of the same content replaces it.
func (s *Store) PutBlob(r io.Reader) (Digest, int64, error) {
	w, err := s.NewBlobWriter()
	if err != nil {
		return Digest{}, 0, err
	}
	if _, err := io.Copy(w, r); err != nil {
		w.Abort()
		return Digest{}, 0, fmt.Errorf("put blob: %w", err)
	}
	return w.Commit()
}

// BlobWriter is a blob being written as its bytes come (PutBlob, or a
// stream such as an exec's output stored while the command runs): a temp
// file in the blob directory, hashed as it is written. Commit names it by
// its digest as PutBlob does; Abort drops it. Write is not safe for
// concurrent use, but ReadAt of the bytes written so far is, beside Write.
type BlobWriter struct {
	s    *Store
	f    *os.File
	h    hash.Hash
	n    int64
	done bool
}

// NewBlobWriter starts a blob.
func (s *Store) NewBlobWriter() (*BlobWriter, error) {
	f, err := os.CreateTemp(filepath.Join(s.dir, "blobs"), tmpPrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("put blob: %w", err)
	}
	return &BlobWriter{s: s, f: f, h: sha256.New()}, nil
}

// Write appends p to the blob.
func (w *BlobWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, errors.New("put blob: write after its end")
	}
	n, err := w.f.Write(p)
	w.h.Write(p[:n])
	w.n += int64(n)
	if err != nil {
		return n, fmt.Errorf("put blob: %w", err)
	}
	return n, nil
}

// Size is how many bytes were written.
func (w *BlobWriter) Size() int64 { return w.n }

// ReadAt reads bytes already written (before Commit or Abort).
func (w *BlobWriter) ReadAt(p []byte, off int64) (int, error) { return w.f.ReadAt(p, off) }

// Abort drops the blob; it is safe after Commit (which it leaves alone).
func (w *BlobWriter) Abort() {
	if w.done {
		return
	}
	w.done = true
	w.f.Close()
	os.Remove(w.f.Name())
}

// Commit ends the blob and stores it under its digest (see PutBlob).
func (w *BlobWriter) Commit() (Digest, int64, error) {
	if w.done {
		return Digest{}, 0, errors.New("put blob: commit after its end")
	}
	s, f, tmp, n := w.s, w.f, w.f.Name(), w.n
	w.done = true
	fail := func(err error) (Digest, int64, error) {
		f.Close()
		os.Remove(tmp)
		return Digest{}, 0, fmt.Errorf("put blob: %w", err)
	}
	if err := f.Chmod(BlobMode); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	var d Digest
	w.h.Sum(d[:0])
	final := s.BlobPath(d)
	if s.blobIntact(final, d, n) {
		os.Remove(tmp)
		// The copy present may itself be waiting for a sync (this or
		// another process wrote it): the next Sync covers it.
		s.dirty.Store(true)
		return d, n, nil
	}
	if err := os.MkdirAll(filepath.Dir(final), DirMode); err != nil {
		return fail(err)
	}
	s.dirty.Store(true)
	if err := os.Rename(tmp, final); err != nil {
		return fail(err)
	}
	return d, n, nil
}

// blobIntact reports whether path is a regular file of size bytes that
// hashes to d. Dedup trusts nothing else.
func (s *Store) blobIntact(path string, d Digest, size int64) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != size {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false
	}
	var got Digest
	h.Sum(got[:0])
	return got == d
}

// Sync makes every blob PutBlob wrote (or found) since the last Sync
// durable, with one syncfs(2) of the store's file system. Put and PutRef
// call it before anything durable names a blob.
func (s *Store) Sync() error {
	if !s.dirty.Swap(false) {
		return nil
	}
	if err := atomicfile.SyncFS(filepath.Join(s.dir, "blobs")); err != nil {
		s.dirty.Store(true)
		return fmt.Errorf("sync blobs: %w", err)
	}
	return nil
}

// OpenBlob opens blob d. The reader re-hashes what it returns; at the end
// of the blob it returns an error wrapping ErrHashMismatch instead of io.EOF
// if the bytes do not hash to d. Read to the end before trusting the data.
func (s *Store) OpenBlob(d Digest) (io.ReadCloser, error) {
	path := s.BlobPath(d)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open blob %s: %w (expected at %s)", d, ErrBlobMissing, path)
	}
	if err != nil {
		return nil, fmt.Errorf("open blob %s: %w", d, err)
	}
	return &verifyingReader{f: f, h: sha256.New(), want: d, path: path}, nil
}

type verifyingReader struct {
	f    *os.File
	h    hash.Hash
	want Digest
	path string
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	n, err := v.f.Read(p)
	v.h.Write(p[:n])
	if err == io.EOF {
		var got Digest
		v.h.Sum(got[:0])
		if got != v.want {
			return n, fmt.Errorf("blob %s: %w: %s hashes to %s", v.want, ErrHashMismatch, v.path, got)
		}
	}
	return n, err
}

func (v *verifyingReader) Close() error { return v.f.Close() }

// VerifyBlob re-hashes blob d.
func (s *Store) VerifyBlob(d Digest) error {
	r, err := s.OpenBlob(d)
	if err != nil {
		return err
	}
	defer r.Close()
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	return nil
}

// PutNAR serialises path (a file, directory or symlink) as a NAR with
// go-nix's nar.DumpPath and stores it as a blob. It returns the NAR hash,
// the same value `nix hash path PATH` prints, and the NAR's size. The blob's
// digest is hash.Blob().
//
// PutNAR is for paths the host controls (fetched inputs): it follows
// symlinks in path's parents. What a job controls is serialised through
// fsx/jobfs and stored with PutNARFunc.
func (s *Store) PutNAR(path string) (NarHash, int64, error) {
	if _, err := os.Lstat(path); err != nil {
		return NarHash{}, 0, fmt.Errorf("put nar: %w", err)
	}
	h, n, err := s.PutNARFunc(func(w io.Writer) error { return nar.DumpPath(w, path) })
	if err != nil {
		return NarHash{}, 0, fmt.Errorf("put nar of %s: %w", path, err)
	}
	return h, n, nil
}

// PutNARFunc stores the NAR that dump writes to w as a blob and returns its
// hash and size, like PutNAR. If dump fails, nothing is stored and its error
// is returned wrapped (errors.Is and errors.As see it).
func (s *Store) PutNARFunc(dump func(w io.Writer) error) (NarHash, int64, error) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := dump(pw)
		pw.CloseWithError(err)
		done <- err
	}()
	d, n, err := s.PutBlob(pr)
	pr.Close() // a dump still writing stops with io.ErrClosedPipe
	if dumpErr := <-done; dumpErr != nil && !errors.Is(dumpErr, io.ErrClosedPipe) {
		return NarHash{}, 0, fmt.Errorf("put nar: %w", dumpErr)
	}
	if err != nil {
		return NarHash{}, 0, err
	}
	return NarHash(d), n, nil
}

var refName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// PutRef records that key of kind (such as "git" and a commit) resolves to
// blob d. Refs are how inputs that are not pinned by a content hash (a git
// commit) find their cached content.
func (s *Store) PutRef(kind, key string, d Digest) error {
	path, err := s.refPath(kind, key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), DirMode); err != nil {
		return fmt.Errorf("put ref %s/%s: %w", kind, key, err)
	}
	// The blob a ref names is durable before the ref: one syncfs covers
	// both (see atomicfile.Options.SyncFS).
	if err := atomicfile.Write(path, []byte(d.String()+"\n"), 0o644, atomicfile.Options{SyncFS: s.dirty.Swap(false)}); err != nil {
		s.dirty.Store(true)
		return fmt.Errorf("put ref %s/%s: %w", kind, key, err)
	}
	return nil
}

// Ref returns the digest stored for key of kind; ok is false when there is
// none or its blob is gone.
func (s *Store) Ref(kind, key string) (d Digest, ok bool, err error) {
	path, err := s.refPath(kind, key)
	if err != nil {
		return d, false, err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return d, false, nil
	}
	if err != nil {
		return d, false, fmt.Errorf("read ref %s/%s: %w", kind, key, err)
	}
	d, err = ParseDigest(strings.TrimSpace(string(b)))
	if err != nil {
		return d, false, fmt.Errorf("read ref %s/%s (%s): %w", kind, key, path, err)
	}
	return d, s.HasBlob(d), nil
}

func (s *Store) refPath(kind, key string) (string, error) {
	if !refName.MatchString(kind) || !refName.MatchString(key) {
		return "", fmt.Errorf("ref %q/%q: names are lowercase letters, digits, '.', '_' and '-'", kind, key)
	}
	return filepath.Join(s.dir, "refs", kind, key), nil
}

// openBlobFile opens blob d for reading as it is stored, without
// verifying it, and returns its size (Push, whose remote checks the bytes).
func (s *Store) openBlobFile(d Digest) (*os.File, int64, error) {
	path := s.BlobPath(d)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("open blob %s: %w (expected at %s)", d, ErrBlobMissing, path)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("open blob %s: %w", d, err)
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("open blob %s: %s is not a regular file", d, path)
	}
	return f, fi.Size(), nil
}
