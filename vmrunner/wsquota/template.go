package wsquota

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Templates makes each kind of workspace filesystem (size, inodes, owner)
// once, in Dir, and gives every Mount of that kind a sparse copy of it:
// mkfs.ext4, most of a quota's cost, then runs once per kind rather than
// once per step. The copies are identical, UUID included, which nothing
// here relies on. Dir must be out of the jobs' reach; it is removed by
// whoever made it (the pipeline's run directory holds it).
type Templates struct {
	Dir string

	mu   sync.Mutex
	made map[string]string // key → template image
}

// image returns the template image for s, making it with mkfs first.
func (t *Templates) image(ctx context.Context, mkfs string, s Spec) (string, error) {
	key := fmt.Sprintf("%d-%d-%d-%d", s.Bytes, s.inodes(), s.UID, s.GID)
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.made[key]; ok {
		return p, nil
	}
	if err := os.MkdirAll(t.Dir, 0o700); err != nil {
		return "", fmt.Errorf("make template image: %w", err)
	}
	p := filepath.Join(t.Dir, key+".img")
	if err := makeImage(ctx, mkfs, p, s); err != nil {
		os.Remove(p)
		return "", fmt.Errorf("make template image: %w", err)
	}
	if t.made == nil {
		t.made = map[string]string{}
	}
	t.made[key] = p
	return p, nil
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

// copySparse copies the data of src into dst (already sized like it),
// leaving src's holes as holes.
func copySparse(dst, src *os.File) error {
	sfd, dfd := int(src.Fd()), int(dst.Fd())
	var off int64
	for {
		data, err := unix.Seek(sfd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // no data past off
		}
		if err != nil {
			return fmt.Errorf("copy template: %w", err)
		}
		hole, err := unix.Seek(sfd, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("copy template: %w", err)
		}
		for r, w := data, data; r < hole; {
			n, err := unix.CopyFileRange(sfd, &r, dfd, &w, int(hole-r), 0)
			if err != nil || n == 0 {
				// Another filesystem, or an old kernel: copy through memory.
				if _, err := io.Copy(io.NewOffsetWriter(dst, r), io.NewSectionReader(src, r, hole-r)); err != nil {
					return fmt.Errorf("copy template: %w", err)
				}
				break
			}
		}
		off = hole
	}
}
