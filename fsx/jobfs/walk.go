package jobfs

import (
	"fmt"
	"io"
	"path"
	"slices"

	"github.com/nix-community/go-nix/pkg/nar"
	"golang.org/x/sys/unix"
)

// Budget bounds what the outputs of one step may add up to: the bytes of
// their regular files (apparent sizes, so a sparse file counts in full) and
// their entries (files, directories and symlinks). Share one Budget across
// the outputs of a step; Bytes and Entries say what was used so far.
type Budget struct {
	MaxBytes   int64
	MaxEntries int64
	Bytes      int64
	Entries    int64
}

func (b *Budget) entry(rel string) error {
	b.Entries++
	if b.Entries > b.MaxEntries {
		return &LimitError{Path: rel, What: "entries", Size: b.Entries, Used: b.Entries - 1, Limit: b.MaxEntries}
	}
	return nil
}

// DumpNAR writes rel (a regular file, directory or symlink) to w as a NAR:
// the bytes `nix-store --dump` writes for the same tree, so its sha256 is
// what `nix hash path` prints. Symlinks are written as symlinks. A FIFO,
// socket or device anywhere in the tree, a symlink on the way to rel, or a
// tree over b fails the dump; w has then received part of a NAR.
func (r *Root) DumpNAR(w io.Writer, rel string, b *Budget) error {
	nw, err := nar.NewWriter(w)
	if err != nil {
		return err
	}
	if err := r.dump(nw, rel, "/", b); err != nil {
		nw.Close() // stops the writer's goroutine; its error adds nothing
		return err
	}
	return nw.Close()
}

func (r *Root) dump(nw *nar.Writer, rel, narPath string, b *Budget) error {
	if err := b.entry(rel); err != nil {
		return err
	}
	info, fd, err := r.pathInfo(rel)
	if err != nil {
		return err
	}
	if info.Kind != File {
		unix.Close(fd) // a deep tree must not hold a descriptor per level
	} else {
		defer unix.Close(fd)
	}
	switch info.Kind {
	case Symlink:
		return nw.WriteHeader(&nar.Header{Path: narPath, Type: nar.TypeSymlink, LinkTarget: info.Target})
	case Dir:
		if err := nw.WriteHeader(&nar.Header{Path: narPath, Type: nar.TypeDirectory}); err != nil {
			return err
		}
		names, err := r.ReadDir(rel, b.MaxEntries-b.Entries)
		if err != nil {
			if le, ok := err.(*LimitError); ok {
				le.Size += b.Entries
				le.Limit = b.MaxEntries
			}
			return err
		}
		for _, name := range names {
			if err := r.dump(nw, path.Join(rel, name), path.Join(narPath, name), b); err != nil {
				return err
			}
		}
		return nil
	}
	if b.Bytes+info.Size > b.MaxBytes {
		return &LimitError{Path: rel, What: "bytes", Size: info.Size, Used: b.Bytes, Limit: b.MaxBytes}
	}
	b.Bytes += info.Size
	f, err := reopen(fd, rel)
	if err != nil {
		return err
	}
	defer f.Close()
	err = nw.WriteHeader(&nar.Header{Path: narPath, Type: nar.TypeRegular, Size: info.Size, Executable: info.Mode&0o100 != 0})
	if err != nil {
		return err
	}
	n, err := io.CopyN(nw, f, info.Size)
	if err == io.EOF {
		return fmt.Errorf("%s: shrank from %d to %d bytes while it was read", rel, info.Size, n)
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", rel, err)
	}
	return nil
}

// LchownAll gives rel and everything beneath it to uid:gid. It never
// follows a symlink: a symlink is chowned itself, and a directory reached
// through one is not entered. FIFOs, sockets and devices are chowned
// without being opened.
func (r *Root) LchownAll(rel string, uid, gid int) error {
	fd, st, rel, err := r.lstatFD(rel)
	if err != nil {
		return err
	}
	err = unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("chown %s: %w", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	names, err := r.ReadDir(rel, -1)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := r.LchownAll(path.Join(rel, name), uid, gid); err != nil {
			return err
		}
	}
	return nil
}

func sortNames(names []string) { slices.Sort(names) }
