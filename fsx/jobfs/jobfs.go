// Package jobfs reads what a job controls: paths beneath a workspace or
// control root, never through a symlink, only regular files, directories and
// symlinks, sizes bounded. Its writing half (Root's write methods, and
// Restorer for restores from the record store) creates entries beneath a
// root the same way, never through a symlink and never over an entry.
//
// Everything inside a workspace, a control directory or a guest share is
// hostile: the job may have replaced any component of a path with a symlink
// (to / or /proc), a FIFO, a socket or a device. Root resolves every path
// with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS)
// from a descriptor of the root directory, so no component, the last one
// included, is ever followed through a symlink and no path leaves the root.
// A path is first opened with O_PATH, which opens nothing, and checked with
// fstat; only a regular file is then reopened for reading, through
// /proc/self/fd, so a FIFO or a device is never opened at all. Symlinks are
// reported as symlinks with their target as a plain string, never resolved.
//
// Sizes are bounded by the caller: ReadFile takes a maximum, and DumpNAR
// counts file bytes and entries against a Budget shared by every output of a
// step, checking a file's apparent size before reading it, so a sparse file
// costs its full size.
package jobfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Errors callers can test for with errors.Is.
var (
	// ErrSymlink: a component of the path, or the path itself where a file
	// or directory was required, is a symlink.
	ErrSymlink = errors.New("goes through a symlink")
	// ErrOutside: the path leaves the root ("..", an absolute path).
	ErrOutside = errors.New("leaves the directory it must stay beneath")
	// ErrType: the path is a FIFO, socket or device. It was not opened.
	ErrType = errors.New("not a regular file, directory or symlink")
	// ErrLimit: a size or count bound was reached; the error is a *LimitError.
	ErrLimit = errors.New("over the limit")
)

// Kind is what a path is. Only these three are ever read.
type Kind int

const (
	File Kind = iota + 1
	Dir
	Symlink
)

func (k Kind) String() string {
	switch k {
	case File:
		return "regular file"
	case Dir:
		return "directory"
	case Symlink:
		return "symlink"
	}
	return "kind " + strconv.Itoa(int(k))
}

// Info describes one path beneath a root, as lstat sees it.
type Info struct {
	Kind Kind
	// Size is a regular file's apparent size: what reading it yields,
	// however few blocks it uses.
	Size int64
	Mode fs.FileMode // permission bits
	// Target is a symlink's target, as written; it is never resolved.
	Target string
	// ModTime is the last modification time.
	ModTime time.Time
	// UID and GID own the entry (numbers, as the file system has them).
	UID, GID uint32
}

// Root is a directory the host chose (a workspace, a control directory)
// whose content a job controls. Its methods take slash-separated paths
// relative to it.
type Root struct {
	f    *os.File // O_PATH|O_DIRECTORY
	name string
}

// Open opens dir as a root. dir itself is the host's path; its last
// component must be a directory, not a symlink to one.
func Open(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			if fi, lerr := os.Lstat(dir); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
				return nil, fmt.Errorf("open %s: %w", dir, ErrSymlink)
			}
		}
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return &Root{f: os.NewFile(uintptr(fd), dir), name: dir}, nil
}

// Name is the host path the root was opened with.
func (r *Root) Name() string { return r.name }

// Close releases the root.
func (r *Root) Close() error { return r.f.Close() }

// clean checks rel and returns it in the form openat2 takes ("." for the
// root itself).
func clean(rel string) (string, error) {
	if rel == "" || rel == "." {
		return ".", nil
	}
	rel = filepath.FromSlash(rel)
	if !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%q: %w", rel, ErrOutside)
	}
	return filepath.Clean(rel), nil
}

const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openat opens rel beneath the root with flags, never through a symlink.
func (r *Root) openat(rel string, flags int) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW), Resolve: resolve}
	for {
		fd, err := unix.Openat2(int(r.f.Fd()), rel, &how)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			continue // EAGAIN: a rename raced the lookup; try again
		case errors.Is(err, unix.ELOOP):
			return -1, fmt.Errorf("%s: %w", rel, ErrSymlink)
		case errors.Is(err, unix.EXDEV):
			return -1, fmt.Errorf("%s: %w", rel, ErrOutside)
		}
		return -1, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
}

// lstatFD opens rel with O_PATH, which opens nothing (no FIFO blocks, no
// device driver runs), and fstats it. The caller closes the descriptor.
func (r *Root) lstatFD(rel string) (int, unix.Stat_t, string, error) {
	var st unix.Stat_t
	rel, err := clean(rel)
	if err != nil {
		return -1, st, rel, err
	}
	fd, err := r.openat(rel, unix.O_PATH)
	if err != nil {
		return -1, st, rel, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, rel, &fs.PathError{Op: "stat", Path: rel, Err: err}
	}
	return fd, st, rel, nil
}

// pathInfo reports what rel is. The O_PATH descriptor is returned with it
// for the caller to close; a FIFO, socket or device is ErrType.
func (r *Root) pathInfo(rel string) (Info, int, error) {
	fd, st, rel, err := r.lstatFD(rel)
	if err != nil {
		return Info{}, -1, err
	}
	info := Info{Mode: fs.FileMode(st.Mode & 0o777), ModTime: time.Unix(st.Mtim.Unix()).UTC(), UID: st.Uid, GID: st.Gid}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		info.Kind, info.Size = File, st.Size
		return info, fd, nil
	case unix.S_IFDIR:
		info.Kind = Dir
		return info, fd, nil
	case unix.S_IFLNK:
		info.Kind = Symlink
		if info.Target, err = readlink(fd, st.Size); err != nil {
			unix.Close(fd)
			return Info{}, -1, &fs.PathError{Op: "readlink", Path: rel, Err: err}
		}
		return info, fd, nil
	}
	unix.Close(fd)
	return Info{}, -1, fmt.Errorf("%s: %w (%s)", rel, ErrType, typeName(st.Mode))
}

func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	}
	return fmt.Sprintf("file type %#o", mode&unix.S_IFMT)
}

// readlink reads the target of the symlink fd (an O_PATH descriptor).
func readlink(fd int, size int64) (string, error) {
	n := int(size) + 1
	if n < 64 || n > unix.PathMax {
		n = unix.PathMax
	}
	buf := make([]byte, n)
	m, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	if m >= len(buf) {
		return "", errors.New("symlink target longer than PATH_MAX")
	}
	return string(buf[:m]), nil
}

// Lstat reports what rel is, without following it if it is a symlink and
// without following any symlink on the way to it.
func (r *Root) Lstat(rel string) (Info, error) {
	info, fd, err := r.pathInfo(rel)
	if err == nil {
		unix.Close(fd)
	}
	return info, err
}

// OpenFile opens rel for reading. It must be a regular file: anything else
// (a symlink, a FIFO, a device) is refused without being opened.
func (r *Root) OpenFile(rel string) (*os.File, Info, error) {
	info, fd, err := r.pathInfo(rel)
	if err != nil {
		return nil, info, err
	}
	defer unix.Close(fd)
	if info.Kind != File {
		if info.Kind == Symlink {
			return nil, info, fmt.Errorf("%s: is a symlink, not a regular file: %w", rel, ErrSymlink)
		}
		return nil, info, fmt.Errorf("%s: is a %s, not a regular file", rel, info.Kind)
	}
	f, err := reopen(fd, rel)
	return f, info, err
}

// reopen opens for reading the very inode the O_PATH descriptor fd was
// checked to be, so a swap after the check cannot turn it into something
// else.
func reopen(fd int, rel string) (*os.File, error) {
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), os.O_RDONLY|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("reopen %s: %w", rel, err)
	}
	return f, nil
}

// ReadFile reads the regular file rel whole, refusing one larger than max
// bytes with a *LimitError.
func (r *Root) ReadFile(rel string, max int64) ([]byte, error) {
	f, info, err := r.OpenFile(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if info.Size > max {
		return nil, &LimitError{Path: rel, What: "file", Size: info.Size, Limit: max}
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", rel, err)
	}
	if int64(len(b)) > max {
		return nil, &LimitError{Path: rel, What: "file", Size: int64(len(b)), Limit: max}
	}
	return b, nil
}

// ReadDir lists the names in directory rel, sorted bytewise (the order of
// a NAR). More than max names is a *LimitError; max < 0 means no bound.
func (r *Root) ReadDir(rel string, max int64) ([]string, error) {
	rel, err := clean(rel)
	if err != nil {
		return nil, err
	}
	fd, err := r.openat(rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	d := os.NewFile(uintptr(fd), rel)
	defer d.Close()
	var names []string
	for {
		batch, err := d.Readdirnames(1024)
		names = append(names, batch...)
		if max >= 0 && int64(len(names)) > max {
			return nil, &LimitError{Path: rel, What: "entries", Size: int64(len(names)), Limit: max}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read directory %s: %w", rel, err)
		}
	}
	sortNames(names)
	return names, nil
}

// LimitError says which path crossed which bound.
type LimitError struct {
	Path string // beneath the root; for a budget, the path that crossed it
	// What was counted: "file" (one file's size against a maximum),
	// "bytes" (file bytes against a budget) or "entries".
	What  string
	Size  int64 // the file's size, or the count reached
	Used  int64 // bytes or entries counted before this path (budgets)
	Limit int64
}

func (e *LimitError) Error() string {
	switch e.What {
	case "bytes":
		if e.Used > 0 {
			return fmt.Sprintf("file %s is %d bytes, which with the %d bytes before it is over the limit of %d bytes", e.Path, e.Size, e.Used, e.Limit)
		}
		return fmt.Sprintf("file %s is %d bytes, over the limit of %d bytes", e.Path, e.Size, e.Limit)
	case "entries":
		return fmt.Sprintf("%s: more than %d entries", e.Path, e.Limit)
	}
	return fmt.Sprintf("%s is %d bytes, over the limit of %d bytes", e.Path, e.Size, e.Limit)
}

// Is makes errors.Is(err, ErrLimit) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }
