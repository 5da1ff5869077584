package jobfs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// PendingFile is a regular file being written beneath a root that appears
// at its path only when Commit is called, whole: a write that fails
// midway (the workspace's quota is full, the body broke off, it passed a
// size limit) leaves what was at the path as it was and nothing else.
//
// It is made in the path's directory, so its bytes count against the
// same filesystem (and quota) as the file's. Where the filesystem makes
// unnamed files (O_TMPFILE: ext4, tmpfs, xfs, btrfs) it has no name, so
// the job cannot see or open it while it is written; elsewhere it is a
// hidden file ".agentsandbox-put-*" beside the path, removed by Abort.
type PendingFile struct {
	*os.File
	root *Root
	rel  string // the path it is committed to
	dir  int    // O_PATH descriptor of its directory
	base string // rel's last component
	name string // its hidden name when the filesystem has no O_TMPFILE
	done bool
}

// noTmpfile makes CreatePending act as on a filesystem without
// O_TMPFILE (tests).
var noTmpfile bool

// PendingPrefix begins the name of a PendingFile made without O_TMPFILE.
const PendingPrefix = ".agentsandbox-put-"

// CreatePending starts a PendingFile for rel (whose parent must exist),
// owned by uid:gid with perm. Like CreateFile it refuses a path that is
// a symlink, directory, FIFO or device now, and never resolves one.
func (r *Root) CreatePending(rel string, perm fs.FileMode, uid, gid int) (*PendingFile, error) {
	if info, err := r.Lstat(rel); err == nil && info.Kind != File {
		return nil, fmt.Errorf("%s: is a %s, not a regular file", rel, info.Kind)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	dir, base, err := r.parent(rel)
	if err != nil {
		return nil, err
	}
	p := &PendingFile{root: r, rel: rel, dir: dir, base: base}
	fd, err := openBeneath(dir, ".", unix.O_TMPFILE|unix.O_WRONLY, perm)
	if noTmpfile && err == nil {
		unix.Close(fd)
		err = unix.EOPNOTSUPP
	}
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL) {
		fd, err = p.createNamed(perm)
	}
	if err != nil {
		unix.Close(dir)
		return nil, &fs.PathError{Op: "create", Path: rel, Err: err}
	}
	if err := unix.Fchown(fd, uid, gid); err != nil {
		p.abort(fd)
		return nil, &fs.PathError{Op: "chown", Path: rel, Err: err}
	}
	if err := unix.Fchmod(fd, uint32(perm)); err != nil {
		p.abort(fd)
		return nil, &fs.PathError{Op: "chmod", Path: rel, Err: err}
	}
	p.File = os.NewFile(uintptr(fd), filepath.Join(r.name, filepath.FromSlash(rel)))
	return p, nil
}

// openBeneath opens rel beneath the directory dirfd with flags and mode,
// never through a symlink.
func openBeneath(dirfd int, rel string, flags int, mode fs.FileMode) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW), Mode: uint64(mode.Perm()), Resolve: resolve}
	for {
		fd, err := unix.Openat2(dirfd, rel, &how)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		return fd, err
	}
}

// createNamed makes the hidden file of a filesystem without O_TMPFILE.
func (p *PendingFile) createNamed(perm fs.FileMode) (int, error) {
	for {
		name := PendingPrefix + randomSuffix()
		fd, err := openBeneath(p.dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, perm)
		if errors.Is(err, unix.EEXIST) {
			continue // the job made one of that name: take another
		}
		if err == nil {
			p.name = name
		}
		return fd, err
	}
}

func randomSuffix() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Commit puts the file at its path, replacing the regular file (or a
// symlink itself, never its target) that is there; a directory there is
// an error. The file is closed either way.
func (p *PendingFile) Commit() error {
	if p.done {
		return fmt.Errorf("%s: already committed or aborted", p.rel)
	}
	p.done = true
	defer unix.Close(p.dir)
	fd := int(p.File.Fd())
	if p.name == "" {
		name, err := p.link(fd)
		if err != nil {
			p.File.Close()
			return &fs.PathError{Op: "link", Path: p.rel, Err: err}
		}
		p.name = name
	}
	if err := p.File.Close(); err != nil {
		unix.Unlinkat(p.dir, p.name, 0)
		return &fs.PathError{Op: "write", Path: p.rel, Err: err}
	}
	if err := unix.Renameat(p.dir, p.name, p.dir, p.base); err != nil {
		unix.Unlinkat(p.dir, p.name, 0)
		return &fs.PathError{Op: "rename", Path: p.rel, Err: err}
	}
	return nil
}

// link gives the unnamed file a hidden name in its directory, for the
// rename into place (linkat cannot replace a file). AT_EMPTY_PATH needs
// CAP_DAC_READ_SEARCH; without it the file's /proc/self/fd link serves.
func (p *PendingFile) link(fd int) (string, error) {
	for {
		name := PendingPrefix + randomSuffix()
		err := unix.Linkat(fd, "", p.dir, name, unix.AT_EMPTY_PATH)
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOENT) {
			err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), p.dir, name, unix.AT_SYMLINK_FOLLOW)
		}
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		return name, err
	}
}

// Abort discards the file: nothing appears at its path, and what was
// there stays. It does nothing after Commit.
func (p *PendingFile) Abort() {
	if p.done {
		return
	}
	p.done = true
	p.File.Close()
	if p.name != "" {
		unix.Unlinkat(p.dir, p.name, 0)
	}
	unix.Close(p.dir)
}

// abort undoes a CreatePending that failed after its file was made.
func (p *PendingFile) abort(fd int) {
	unix.Close(fd)
	if p.name != "" {
		unix.Unlinkat(p.dir, p.name, 0)
	}
	unix.Close(p.dir)
}
