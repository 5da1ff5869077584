package jobfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Restorer is a Root seen as the directory a restore from the record store
// writes beneath (record.RestoreDir): record exports, inputs and needed
// outputs placed in a workspace, snapshot restores. Every path is resolved
// beneath the root with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), the
// last component included, so a symlink that an earlier entry, an earlier
// output or a job left in the tree is never followed: a write that would go
// through one fails with ErrSymlink. A new entry must not exist; nothing is
// ever replaced.
//
// What it creates is owned by UID:GID; -1 keeps the caller's (fchown(2)
// leaves an id of -1 as it is).
type Restorer struct {
	root     *Root
	uid, gid int
	own      bool // close root with the Restorer
}

// Restorer returns r as a restore target whose new entries go to uid:gid
// (-1, -1: the caller's). Closing r ends it.
func (r *Root) Restorer(uid, gid int) *Restorer {
	return &Restorer{root: r, uid: uid, gid: gid}
}

// OpenRestorer makes the host directory dir if it is missing (the caller
// chose it: symlinks in it are the caller's) and opens it as a restore
// target owned by the caller. Close it when done.
func OpenRestorer(dir string) (*Restorer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open %s for a restore: %w", dir, err)
	}
	r, err := Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open %s for a restore: %w", dir, err)
	}
	return &Restorer{root: r, uid: -1, gid: -1, own: true}, nil
}

// Name is the host path of the directory restored into.
func (t *Restorer) Name() string { return t.root.Name() }

// Close releases the root if OpenRestorer opened it.
func (t *Restorer) Close() error {
	if t.own {
		return t.root.Close()
	}
	return nil
}

func (t *Restorer) chown(pfd int, base string) error {
	if t.uid < 0 && t.gid < 0 {
		return nil
	}
	return unix.Fchownat(pfd, base, t.uid, t.gid, unix.AT_SYMLINK_NOFOLLOW)
}

// Exists reports whether rel exists, without following it. A symlink on
// the way to it is an error, not an answer.
func (t *Restorer) Exists(rel string) (bool, error) {
	_, err := t.root.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// MkdirAll makes rel and its missing parents (0o755); an existing directory
// is fine, a symlink or anything else in the way is an error.
func (t *Restorer) MkdirAll(rel string) error {
	return t.root.MkdirAll(rel, 0o755, t.uid, t.gid)
}

// Mkdir makes the new directory rel with perm (less the umask).
func (t *Restorer) Mkdir(rel string, perm fs.FileMode) error {
	pfd, base, err := t.root.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Mkdirat(pfd, base, uint32(perm.Perm())); err != nil {
		return &fs.PathError{Op: "mkdir", Path: rel, Err: err}
	}
	if err := t.chown(pfd, base); err != nil {
		return &fs.PathError{Op: "chown", Path: rel, Err: err}
	}
	return nil
}

// Symlink makes the new symlink rel to target, stored as written and never
// resolved.
func (t *Restorer) Symlink(target, rel string) error {
	return t.root.Symlink(target, rel, t.uid, t.gid)
}

// Create creates the new regular file rel with perm (less the umask) and
// opens it for writing. O_EXCL: a symlink at rel is not followed but is an
// error, like anything else there.
func (t *Restorer) Create(rel string, perm fs.FileMode) (io.WriteCloser, error) {
	crel, err := clean(rel)
	if err != nil {
		return nil, err
	}
	if crel == "." {
		return nil, fmt.Errorf("the restore directory itself: %w", fs.ErrInvalid)
	}
	how := unix.OpenHow{
		Flags:   uint64(unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_NOCTTY | unix.O_CLOEXEC),
		Mode:    uint64(perm.Perm()),
		Resolve: resolve,
	}
	var fd int
	for {
		fd, err = unix.Openat2(int(t.root.f.Fd()), crel, &how)
		if !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.EAGAIN) {
			break
		}
	}
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("%s: %w", crel, ErrSymlink)
	case errors.Is(err, unix.EXDEV):
		return nil, fmt.Errorf("%s: %w", crel, ErrOutside)
	case err != nil:
		return nil, &fs.PathError{Op: "create", Path: crel, Err: err}
	}
	if t.uid >= 0 || t.gid >= 0 {
		if err := unix.Fchown(fd, t.uid, t.gid); err != nil {
			unix.Close(fd)
			return nil, &fs.PathError{Op: "chown", Path: crel, Err: err}
		}
	}
	return os.NewFile(uintptr(fd), filepath.Join(t.root.name, crel)), nil
}

// Rename moves from to to, both beneath the root. to is never replaced
// (renameat2 RENAME_NOREPLACE); an existing to is an error wrapping
// fs.ErrExist. Neither name's last component is followed: a rename moves
// the entry itself.
func (t *Restorer) Rename(from, to string) error { return t.root.Rename(from, to) }

// RemoveAll removes rel and everything beneath it, never following a
// symlink (one is removed itself). A missing rel is not an error.
func (t *Restorer) RemoveAll(rel string) error {
	if _, err := t.root.Lstat(rel); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return t.root.Remove(rel, true)
}
