package wsquota

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Templates makes each kind of workspace filesystem once, in Dir, and gives
// every Mount of that kind a sparse copy of it: mkfs.ext4, most of a
// quota's cost, then runs once per kind and mkfs version for as long as
// Dir keeps the image, across runs and processes. The copies are
// identical, UUID included, which nothing here relies on.
//
// Dir is shared: any number of processes may use it at once. A template
// is made under a lock (LockFile), in a temporary file (TempPrefix), synced, sealed with a trailer
// that holds the sha256 of its data, and renamed into place, so a name in
// Dir only ever holds a whole image; a copy is checked against the trailer
// as it is made, and a template that does not match is made again, never
// used. Dir must be out of the jobs' reach (the state directory).
type Templates struct {
	Dir string

	mu sync.Mutex
}

// Template image layout: the filesystem's Bytes bytes, then a trailer of
// trailerLen bytes: trailerMagic, the filesystem's size (8 bytes, little
// endian) and the sha256 of every data region below it (see dataDigest).
const (
	trailerMagic = "agentsandbox-wsquota-template-v1\n"
	trailerLen   = len(trailerMagic) + 8 + sha256.Size
)

// TempPrefix starts the name of a template being made; TemplateSuffix ends
// a finished one.
const (
	TempPrefix     = ".tmp-"
	TemplateSuffix = ".img"
)

// errTorn marks a template that is not what its trailer says.
var errTorn = errors.New("template image does not match its trailer")

// key names the template of s made by the mkfs.ext4 at mkfs: the
// filesystem's size, inode budget and owner, and the identity of the mkfs
// binary (its device, inode, size and modification time, so that an
// upgraded e2fsprogs makes new templates) and of MkfsArgs' form.
func key(mkfs string, s Spec) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(mkfs, &st); err != nil {
		return "", fmt.Errorf("stat %s: %w", mkfs, err)
	}
	id := sha256.Sum256([]byte(fmt.Sprintf("%d %d %d %d.%09d format %s", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, mkfsFormat)))
	return fmt.Sprintf("%d-%d-%d-%d-mkfs%s", s.Bytes, s.inodes(), s.UID, s.GID, hex.EncodeToString(id[:6])), nil
}

// MkfsID is the part of a template's name that identifies the mkfs.ext4
// that made it; GCTemplates keeps only templates of the current one.
func MkfsID(mkfs string) (string, error) {
	k, err := key(mkfs, Spec{Bytes: 1, Inodes: 1})
	if err != nil {
		return "", err
	}
	return k[strings.LastIndex(k, "-mkfs")+1:], nil
}

// copyTo fills dst (sized s.Bytes, all holes) with the template of s,
// making the template first when Dir has none. A template that is torn (a
// disk that lost part of it) or that gc removed meanwhile is made again,
// once; another process may replace it at the same time, and the rename
// makes whichever is last the one.
func (t *Templates) copyTo(ctx context.Context, mkfs string, s Spec, dst *os.File) error {
	k, err := key(mkfs, s)
	if err != nil {
		return fmt.Errorf("workspace template: %w", err)
	}
	// One process makes each template once, however many of its steps
	// start at the same time.
	t.mu.Lock()
	defer t.mu.Unlock()
	p := filepath.Join(t.Dir, k+TemplateSuffix)
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		if err := t.makeLocked(ctx, mkfs, s, p, false); err != nil {
			return err
		}
	}
	err = copyTemplate(dst, p, s.Bytes)
	if errors.Is(err, errTorn) || errors.Is(err, fs.ErrNotExist) {
		// dst may hold part of the bad copy: back to all holes.
		if err := dst.Truncate(0); err != nil {
			return fmt.Errorf("copy workspace template: %w", err)
		}
		if err := dst.Truncate(s.Bytes); err != nil {
			return fmt.Errorf("copy workspace template: %w", err)
		}
		if err := t.makeLocked(ctx, mkfs, s, p, true); err != nil {
			return err
		}
		err = copyTemplate(dst, p, s.Bytes)
	}
	if err != nil {
		return fmt.Errorf("copy workspace template %s: %w", p, err)
	}
	return nil
}

// LockFile, in a template directory, serialises the making of templates
// between processes, so that applies started together run one mkfs, not
// one each.
const LockFile = "lock"

// makeLocked makes the template of s at p under LockFile: unless another
// process made it while this one waited (always, with again: the one
// there is torn).
func (t *Templates) makeLocked(ctx context.Context, mkfs string, s Spec, p string, again bool) error {
	if err := os.MkdirAll(t.Dir, 0o700); err != nil {
		return fmt.Errorf("make workspace template: %w", err)
	}
	var before os.FileInfo
	if again {
		before, _ = os.Stat(p)
	}
	l, err := os.OpenFile(filepath.Join(t.Dir, LockFile), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("make workspace template: %w", err)
	}
	defer l.Close() // unlocks
	for {
		err := unix.Flock(int(l.Fd()), unix.LOCK_EX)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("make workspace template: lock %s: %w", l.Name(), err)
		}
	}
	now, err := os.Stat(p)
	switch {
	case err == nil && !again:
		return nil // made while we waited
	case err == nil && again && before != nil && !os.SameFile(before, now):
		return nil // replaced while we waited
	}
	return t.make(ctx, mkfs, s, p)
}

// make makes the template of s at p: mkfs.ext4 in a temporary file of Dir,
// the trailer, fsync, rename, fsync of Dir.
func (t *Templates) make(ctx context.Context, mkfs string, s Spec, p string) (err error) {
	if err := os.MkdirAll(t.Dir, 0o700); err != nil {
		return fmt.Errorf("make workspace template: %w", err)
	}
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		return fmt.Errorf("make workspace template: %w", err)
	}
	tmp := filepath.Join(t.Dir, fmt.Sprintf("%s%d-%s-%s", TempPrefix, os.Getpid(), hex.EncodeToString(r[:]), filepath.Base(p)))
	defer func() {
		if err != nil {
			os.Remove(tmp)
			err = fmt.Errorf("make workspace template: %w", err)
		}
	}()
	if err := makeImage(ctx, mkfs, tmp, s); err != nil {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	sum, err := dataDigest(f, s.Bytes, nil)
	if err != nil {
		return err
	}
	tr := make([]byte, 0, trailerLen)
	tr = append(tr, trailerMagic...)
	tr = binary.LittleEndian.AppendUint64(tr, uint64(s.Bytes))
	tr = append(tr, sum[:]...)
	if _, err := f.WriteAt(tr, s.Bytes); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		return err
	}
	d, err := os.Open(t.Dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// makeImage creates the sparse file path of s.Bytes and makes the
// filesystem in it.
func makeImage(ctx context.Context, mkfs, path string, s Spec) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create image: %w", err)
	}
	err = f.Truncate(s.Bytes)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("size image: %w", err)
	}
	s.Image = path
	argv := MkfsArgs(mkfs, s)
	if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// copyTemplate copies the template at p, of a filesystem of size bytes,
// into dst (already that size), leaving its holes as holes, and checks
// what it copied against the template's trailer: errTorn when it does not
// match (dst then holds garbage).
func copyTemplate(dst *os.File, p string, size int64) error {
	src, err := os.Open(p)
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != size+int64(trailerLen) {
		return fmt.Errorf("%w: %d bytes, want %d", errTorn, fi.Size(), size+int64(trailerLen))
	}
	tr := make([]byte, trailerLen)
	if _, err := src.ReadAt(tr, size); err != nil {
		return err
	}
	if string(tr[:len(trailerMagic)]) != trailerMagic || binary.LittleEndian.Uint64(tr[len(trailerMagic):]) != uint64(size) {
		return fmt.Errorf("%w: no trailer for a %d-byte filesystem", errTorn, size)
	}
	sum, err := dataDigest(src, size, dst)
	if err != nil {
		return err
	}
	if !bytes.Equal(sum[:], tr[len(trailerMagic)+8:]) {
		return fmt.Errorf("%w: sha256 of the data differs", errTorn)
	}
	return nil
}

// dataDigest is the sha256 of the data regions of f below size (each as
// its offset, length and bytes, in order; holes read as zeros and are not
// hashed), written to dst at the same offsets when dst is not nil. A
// template's data is small (about 80 KiB for 1 GiB with the default
// inodes: superblocks, group descriptors, bitmaps, the root directory).
func dataDigest(f *os.File, size int64, dst *os.File) ([sha256.Size]byte, error) {
	h := sha256.New()
	buf := make([]byte, 256<<10)
	fd := int(f.Fd())
	var hdr [16]byte
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // no data past off
		}
		if err != nil {
			return [sha256.Size]byte{}, fmt.Errorf("read template: %w", err)
		}
		if data >= size {
			break
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return [sha256.Size]byte{}, fmt.Errorf("read template: %w", err)
		}
		hole = min(hole, size)
		binary.LittleEndian.PutUint64(hdr[:8], uint64(data))
		binary.LittleEndian.PutUint64(hdr[8:], uint64(hole-data))
		h.Write(hdr[:])
		for r := data; r < hole; {
			n, err := f.ReadAt(buf[:min(int64(len(buf)), hole-r)], r)
			if n > 0 {
				h.Write(buf[:n])
				if dst != nil {
					if _, werr := dst.WriteAt(buf[:n], r); werr != nil {
						return [sha256.Size]byte{}, fmt.Errorf("copy template: %w", werr)
					}
				}
				r += int64(n)
			}
			if err != nil && !(errors.Is(err, io.EOF) && r >= hole) {
				return [sha256.Size]byte{}, fmt.Errorf("read template: %w", err)
			}
		}
		off = hole
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum, nil
}

// tempMaxAge is how old a temporary template file gets before GCTemplates
// removes it even if a process of its pid runs (mkfs takes a second at
// most; the pid may be another process's by now).
const tempMaxAge = time.Hour

// GCTemplates removes from dir what no use of it needs: temporary files
// whose process is gone (or older than an hour), templates that are not
// whole (a wrong size or no trailer), templates of another mkfs.ext4 than
// mkfs (an upgrade; mkfs "" when the host has none: every template), and
// anything else that is not a template. It reports each as "template
// PATH". A template that is being copied stays readable to its reader
// until it closes it; a Mount that finds its template gone makes it again.
func GCTemplates(dir, mkfs string) (removed []string, err error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("gc workspace templates: %w", err)
	}
	var current string
	if mkfs != "" {
		if current, err = MkfsID(mkfs); err != nil {
			return nil, fmt.Errorf("gc workspace templates: %w", err)
		}
	}
	var errs []error
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if !stale(p, e.Name(), current) {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("gc workspace template: %w", err))
			continue
		}
		removed = append(removed, "template "+p)
	}
	return removed, errors.Join(errs...)
}

// stale reports whether the entry p (named name) of a template directory
// can go; see GCTemplates.
func stale(p, name, mkfsID string) bool {
	fi, err := os.Lstat(p)
	if err != nil {
		return false
	}
	if rest, ok := strings.CutPrefix(name, TempPrefix); ok {
		pid, _, _ := strings.Cut(rest, "-")
		n, err := strconv.Atoi(pid)
		alive := err == nil && n > 0 && syscall.Kill(n, 0) == nil
		return !alive || time.Since(fi.ModTime()) > tempMaxAge
	}
	base, ok := strings.CutSuffix(name, TemplateSuffix)
	if name == LockFile {
		return false
	}
	if !ok || !fi.Mode().IsRegular() || mkfsID == "" || !strings.HasSuffix(base, "-"+mkfsID) {
		return true
	}
	size, err := strconv.ParseInt(strings.SplitN(base, "-", 2)[0], 10, 64)
	if err != nil || fi.Size() != size+int64(trailerLen) {
		return true
	}
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	tr := make([]byte, trailerLen)
	if _, err := f.ReadAt(tr, size); err != nil {
		return true
	}
	return string(tr[:len(trailerMagic)]) != trailerMagic || binary.LittleEndian.Uint64(tr[len(trailerMagic):]) != uint64(size)
}
