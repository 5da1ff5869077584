package vmfixture

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// An Archive is an in-memory initramfs: entries by absolute guest path. It
// is written as a newc cpio archive (the format the kernel unpacks) with
// every timestamp zero, owner root and inode numbers in path order, so the
// same inputs always give the same bytes.
type Archive struct {
	entries map[string]entry
}

type entry struct {
	mode   fs.FileMode // type bits and permissions
	data   []byte      // file contents
	target string      // symlink target
	major  uint32      // device numbers of a character device
	minor  uint32
}

// NewArchive returns an empty archive.
func NewArchive() *Archive { return &Archive{entries: map[string]entry{}} }

// Dir adds a directory and its missing parents.
func (a *Archive) Dir(name string, perm fs.FileMode) {
	name = clean(name)
	if name == "" {
		return
	}
	a.parents(name)
	a.entries[name] = entry{mode: fs.ModeDir | perm.Perm()}
}

// File adds a regular file (and missing parent directories).
func (a *Archive) File(name string, perm fs.FileMode, data []byte) {
	name = clean(name)
	a.parents(name)
	a.entries[name] = entry{mode: perm.Perm(), data: data}
}

// Symlink adds a symbolic link name → target.
func (a *Archive) Symlink(name, target string) {
	name = clean(name)
	a.parents(name)
	a.entries[name] = entry{mode: fs.ModeSymlink | 0o777, target: target}
}

// CharDev adds a character device node, such as /dev/console (5, 1), which
// the kernel opens as init's stdio before any devtmpfs is mounted.
func (a *Archive) CharDev(name string, perm fs.FileMode, major, minor uint32) {
	name = clean(name)
	a.parents(name)
	a.entries[name] = entry{mode: fs.ModeDevice | fs.ModeCharDevice | perm.Perm(), major: major, minor: minor}
}

func (a *Archive) parents(name string) {
	for d := path.Dir(name); d != "." && d != "/" && d != ""; d = path.Dir(d) {
		if _, ok := a.entries[d]; !ok {
			a.entries[d] = entry{mode: fs.ModeDir | 0o755}
		}
	}
}

func clean(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

// WriteTo writes the archive as newc cpio, parents before children.
func (a *Archive) WriteTo(w io.Writer) (int64, error) {
	names := make([]string, 0, len(a.entries))
	for n := range a.entries {
		names = append(names, n)
	}
	sort.Strings(names) // a parent sorts before its children
	cw := &countWriter{w: w}
	for i, n := range names {
		e := a.entries[n]
		body := e.data
		if e.mode&fs.ModeSymlink != 0 {
			body = []byte(e.target)
		}
		if err := writeEntry(cw, uint32(i+1), n, e, body); err != nil {
			return cw.n, err
		}
	}
	if err := writeEntry(cw, 0, "TRAILER!!!", entry{}, nil); err != nil {
		return cw.n, err
	}
	return cw.n, nil
}

// cpioMode converts a Go file mode to the Unix st_mode the header carries.
func cpioMode(m fs.FileMode) uint32 {
	mode := uint32(m.Perm())
	switch {
	case m&fs.ModeDir != 0:
		mode |= 0o040000
	case m&fs.ModeSymlink != 0:
		mode |= 0o120000
	case m&fs.ModeCharDevice != 0:
		mode |= 0o020000
	default:
		mode |= 0o100000
	}
	return mode
}

func writeEntry(w *countWriter, ino uint32, name string, e entry, body []byte) error {
	nlink := uint32(1)
	if e.mode&fs.ModeDir != 0 {
		nlink = 2
	}
	m := cpioMode(e.mode)
	if name == "TRAILER!!!" {
		m = 0
	}
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
	// devminor, rdevmajor, rdevminor, namesize, check
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, m, 0, 0, nlink, 0, len(body), 0, 0, e.major, e.minor, len(name)+1, 0)
	if _, err := io.WriteString(w, hdr+name+"\x00"); err != nil {
		return err
	}
	if err := w.pad(); err != nil {
		return err
	}
	if _, err := w.Write(body); err != nil {
		return err
	}
	return w.pad()
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// pad writes zeros up to the next 4-byte boundary, as newc requires after
// the header+name and after the body.
func (c *countWriter) pad() error {
	if r := c.n % 4; r != 0 {
		_, err := c.Write(make([]byte, 4-r))
		return err
	}
	return nil
}
