package record

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// DirRemote is a Remote in a directory (a store URL file:///DIR), for a
// file system several machines mount, and the Remote the package's own
// tests use. Objects are created with link(2), which fails if the name
// exists, so a Put never replaces an object; a ref is swapped under a lock
// directory (DIR/KEY.lock, removed after; one left by a crashed writer
// makes SwapRef fail after lockWait until it is removed by hand).
type DirRemote struct {
	dir string
}

// lockWait is how long SwapRef waits for another writer's lock.
const lockWait = 10 * time.Second

// OpenDirRemote opens (creating) the remote store in dir.
func OpenDirRemote(dir string) (*DirRemote, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open shared store %s: %w", dir, err)
	}
	for _, sub := range []string{"records", "blobs", "refs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(abs, sub), DirMode); err != nil {
			return nil, fmt.Errorf("open shared store %s: %w", abs, err)
		}
	}
	return &DirRemote{dir: abs}, nil
}

func (r *DirRemote) String() string { return "file://" + r.dir }

func (r *DirRemote) path(key string) (string, error) {
	if key == "" || path.Clean(key) != key || strings.HasPrefix(key, "/") || strings.HasPrefix(key, "../") || strings.HasPrefix(key, "tmp/") {
		return "", fmt.Errorf("shared store %s: bad key %q", r, key)
	}
	return filepath.Join(r.dir, filepath.FromSlash(key)), nil
}

// Has implements Remote.
func (r *DirRemote) Has(_ context.Context, key string) (bool, error) {
	p, err := r.path(key)
	if err != nil {
		return false, err
	}
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("shared store %s: %w", r, err)
	}
	return fi.Mode().IsRegular(), nil
}

// Put implements Remote: the bytes are written to a temp file, checked
// against size and sum, synced, and linked to their name.
func (r *DirRemote) Put(_ context.Context, key string, body io.Reader, size int64, sum Digest) (bool, error) {
	p, err := r.path(key)
	if err != nil {
		return false, err
	}
	f, err := os.CreateTemp(filepath.Join(r.dir, "tmp"), tmpPrefix+"*")
	if err != nil {
		return false, fmt.Errorf("put %s in %s: %w", key, r, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(body, size+1))
	if err != nil {
		return false, fmt.Errorf("put %s in %s: %w", key, r, err)
	}
	var got Digest
	h.Sum(got[:0])
	if n != size || got != sum {
		return false, fmt.Errorf("put %s in %s: %w: sent %d bytes hashing to %s, announced %d bytes hashing to %s", key, r, ErrHashMismatch, n, got, size, sum)
	}
	if err := f.Chmod(0o444); err != nil {
		return false, fmt.Errorf("put %s in %s: %w", key, r, err)
	}
	if err := f.Sync(); err != nil {
		return false, fmt.Errorf("put %s in %s: %w", key, r, err)
	}
	if err := os.MkdirAll(filepath.Dir(p), DirMode); err != nil {
		return false, fmt.Errorf("put %s in %s: %w", key, r, err)
	}
	if err := os.Link(f.Name(), p); errors.Is(err, fs.ErrExist) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("put %s in %s: %w", key, r, err)
	}
	return true, nil
}

// Get implements Remote.
func (r *DirRemote) Get(_ context.Context, key string) (io.ReadCloser, error) {
	p, err := r.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w %s", key, ErrRemoteMissing, r)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s from %s: %w", key, r, err)
	}
	return f, nil
}

// List implements Remote.
func (r *DirRemote) List(_ context.Context, prefix string) ([]string, error) {
	dir, base := path.Split(prefix)
	dir = strings.TrimSuffix(dir, "/")
	p, err := r.path(dir)
	if err != nil {
		return nil, err
	}
	var keys []string
	err = filepath.WalkDir(p, func(f string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(p, f)
		rel = filepath.ToSlash(rel)
		if e.Type().IsRegular() && strings.HasPrefix(rel, base) && !strings.HasPrefix(e.Name(), ".") && !strings.HasSuffix(e.Name(), ".lock") {
			keys = append(keys, dir+"/"+rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s in %s: %w", prefix, r, err)
	}
	slices.Sort(keys)
	return keys, nil
}

// GetRef implements Remote; a ref's version is the sha256 of its value.
func (r *DirRemote) GetRef(_ context.Context, key string) ([]byte, string, error) {
	p, err := r.path(key)
	if err != nil {
		return nil, "", err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("read ref %s in %s: %w", key, r, err)
	}
	return b, refVersion(b), nil
}

func refVersion(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// SwapRef implements Remote.
func (r *DirRemote) SwapRef(ctx context.Context, key string, value []byte, old string) (string, error) {
	p, err := r.path(key)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(p), DirMode); err != nil {
		return "", fmt.Errorf("swap ref %s in %s: %w", key, r, err)
	}
	lock := p + ".lock"
	deadline := time.Now().Add(lockWait)
	for {
		err := os.Mkdir(lock, 0o700)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("swap ref %s in %s: %w", key, r, err)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("swap ref %s in %s: %s is held for more than %s; if no agentsandbox is writing there, remove it", key, r, lock, lockWait)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	defer os.Remove(lock)
	_, cur, err := r.GetRef(ctx, key)
	if err != nil {
		return "", err
	}
	if cur != old {
		return "", fmt.Errorf("swap ref %s in %s: %w", key, r, ErrRefChanged)
	}
	tmp := filepath.Join(r.dir, "tmp", tmpPrefix+refVersion([]byte(key)))
	if err := os.WriteFile(tmp, value, 0o644); err != nil {
		return "", fmt.Errorf("swap ref %s in %s: %w", key, r, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("swap ref %s in %s: %w", key, r, err)
	}
	return refVersion(value), nil
}
