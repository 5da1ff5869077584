package jobfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The writing half, for the files API of long-lived sandboxes: the host
// writes and removes files in a workspace the job controls, beneath its
// root and never through a symlink, like the reading half.

// parent opens rel's parent directory beneath the root (O_PATH) and
// returns it with rel's last component.
func (r *Root) parent(rel string) (int, string, error) {
	rel, err := clean(rel)
	if err != nil {
		return -1, "", err
	}
	if rel == "." {
		return -1, "", fmt.Errorf("the workspace itself: %w", fs.ErrInvalid)
	}
	dir, base := filepath.Split(rel)
	if dir == "" {
		dir = "."
	}
	fd, err := r.openat(filepath.Clean(dir), unix.O_PATH|unix.O_DIRECTORY)
	return fd, base, err
}

// MkdirAll makes rel and its missing parents, each with perm and owned
// by uid:gid, never through a symlink; an existing directory is fine.
func (r *Root) MkdirAll(rel string, perm fs.FileMode, uid, gid int) error {
	rel, err := clean(rel)
	if err != nil || rel == "." {
		return err
	}
	cur := "."
	for _, part := range splitPath(rel) {
		next := filepath.Join(cur, part)
		fd, err := r.openat(cur, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		err = unix.Mkdirat(fd, part, uint32(perm))
		if err == nil {
			if cerr := unix.Fchownat(fd, part, uid, gid, unix.AT_SYMLINK_NOFOLLOW); cerr != nil {
				err = cerr
			}
		} else if errors.Is(err, unix.EEXIST) {
			// It must be a directory, not a symlink the job planted.
			if info, lerr := r.Lstat(next); lerr != nil {
				err = lerr
			} else if info.Kind == Symlink {
				unix.Close(fd)
				return fmt.Errorf("%s: %w", next, ErrSymlink)
			} else {
				err = nil
			}
		}
		unix.Close(fd)
		if err != nil {
			return &fs.PathError{Op: "mkdir", Path: next, Err: err}
		}
		cur = next
	}
	// What exists at rel now must be a directory, not a symlink to one.
	info, err := r.Lstat(rel)
	if err != nil {
		return err
	}
	if info.Kind != Dir {
		return fmt.Errorf("%s: is a %s, not a directory", rel, info.Kind)
	}
	return nil
}

func splitPath(rel string) []string {
	var out []string
	for rel != "." && rel != "" {
		dir, base := filepath.Split(rel)
		out = append([]string{base}, out...)
		rel = filepath.Clean(dir)
		if dir == "" {
			break
		}
	}
	return out
}

// CreateFile creates or truncates the regular file rel for writing (its
// parent must exist), owned by uid:gid with perm. A symlink, FIFO or
// device at rel is refused, never opened.
func (r *Root) CreateFile(rel string, perm fs.FileMode, uid, gid int) (*os.File, error) {
	if info, err := r.Lstat(rel); err == nil && info.Kind != File {
		return nil, fmt.Errorf("%s: is a %s, not a regular file", rel, info.Kind)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	crel, err := clean(rel)
	if err != nil {
		return nil, err
	}
	fd, err := r.openat(crel, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: not a regular file", rel)
	}
	if err := unix.Fchown(fd, uid, gid); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "chown", Path: rel, Err: err}
	}
	if err := unix.Fchmod(fd, uint32(perm)); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "chmod", Path: rel, Err: err}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(r.name, crel)), nil
}

// Remove removes rel: a file, a symlink (itself, never its target) or an
// empty directory; with all, a directory and everything beneath it.
func (r *Root) Remove(rel string, all bool) error {
	info, err := r.Lstat(rel)
	if err != nil {
		return err
	}
	pfd, base, err := r.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if info.Kind == Dir {
		if all {
			crel, _ := clean(rel)
			names, err := r.ReadDir(crel, 1<<20)
			if err != nil {
				return err
			}
			for _, n := range names {
				if err := r.Remove(filepath.Join(crel, n), true); err != nil {
					return err
				}
			}
		}
		if err := unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR); err != nil {
			return &fs.PathError{Op: "remove", Path: rel, Err: err}
		}
		return nil
	}
	if err := unix.Unlinkat(pfd, base, 0); err != nil {
		return &fs.PathError{Op: "remove", Path: rel, Err: err}
	}
	return nil
}

// Symlink makes rel a symlink to target (stored as written, never
// resolved by the host), owned by uid:gid; rel must not exist.
func (r *Root) Symlink(target, rel string, uid, gid int) error {
	pfd, base, err := r.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Symlinkat(target, pfd, base); err != nil {
		return &fs.PathError{Op: "symlink", Path: rel, Err: err}
	}
	if err := unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "chown", Path: rel, Err: err}
	}
	return nil
}

// Rename moves from to to, both beneath the root. to is never replaced
// (renameat2 RENAME_NOREPLACE); an existing to is an error wrapping
// fs.ErrExist. Neither name's last component is followed: a rename moves
// the entry itself. The parents of both are reached without a symlink.
func (r *Root) Rename(from, to string) error {
	ofd, obase, err := r.parent(from)
	if err != nil {
		return err
	}
	defer unix.Close(ofd)
	nfd, nbase, err := r.parent(to)
	if err != nil {
		return err
	}
	defer unix.Close(nfd)
	err = unix.Renameat2(ofd, obase, nfd, nbase, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) {
		// A file system without RENAME_NOREPLACE (NFS, some FUSE), or a
		// directory moved into itself. A plain rename never follows a
		// symlink either, so the only race left is someone else creating
		// to meanwhile, and their entry, not what it points to, would be
		// replaced.
		if _, lerr := r.Lstat(to); lerr == nil {
			err = unix.EEXIST
		} else if errors.Is(lerr, fs.ErrNotExist) {
			err = unix.Renameat(ofd, obase, nfd, nbase)
		} else {
			err = lerr
		}
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}

// Mkdir makes the directory rel (its parent must exist), owned by uid:gid
// with perm; an existing rel, whatever it is, is an error wrapping
// fs.ErrExist.
func (r *Root) Mkdir(rel string, perm fs.FileMode, uid, gid int) error {
	pfd, base, err := r.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Mkdirat(pfd, base, uint32(perm)); err != nil {
		return &fs.PathError{Op: "mkdir", Path: rel, Err: err}
	}
	if err := unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "chown", Path: rel, Err: err}
	}
	return nil
}

// OpenDir opens the directory rel beneath the root with O_PATH, never
// through a symlink, for the caller to watch through /proc/self/fd: the
// descriptor is the directory itself, whatever is renamed on the way
// later. The caller closes it.
func (r *Root) OpenDir(rel string) (*os.File, error) {
	rel, err := clean(rel)
	if err != nil {
		return nil, err
	}
	fd, err := r.openat(rel, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(r.name, rel)), nil
}
