// Package wsquota bounds a step's workspace in bytes and in inodes by giving
// it a filesystem of its own: a sparse image file of exactly the step's
// disk size, made with mkfs.ext4 with a fixed inode count, attached to a
// loop device and mounted nodev,nosuid on the workspace directory. A job
// that writes past the size or creates more files than the inode budget
// gets ENOSPC from its own filesystem; the host's disk holds at most the
// image's size for it, however the job writes (sparse files included).
//
// Why this mechanism (docs/isolation.md, "Workspace quota", has the long
// form):
//   - A tmpfs has no block device, so the step's ioRead/ioWrite could not be
//     throttled (vmrunner.ThrottleWorkspace), and its pages are charged to the
//     step's memory: a job with disk 10GiB and memory 512MiB would be
//     OOM-killed instead of seeing ENOSPC.
//   - Project quotas need the host's filesystem mounted with prjquota (ext4,
//     xfs): not something a tool can count on.
//   - The loop device is a real block device: cgroup.DeviceOf finds it
//     under the workspace and the IO throttle applies to it, on cgroup v1
//     (blkio) and v2 (io) alike. Nothing here depends on the cgroup version.
//
// The job never sees the image or the loop device, only files through the
// kernel's ext4: the kernel never parses an image the job wrote raw.
//
// Templates make mkfs.ext4 run once per kind of workspace (size, inodes,
// owner, mkfs version) for as long as their directory keeps them (the
// state directory's, across runs), and give each Mount a sparse copy
// checked against the template's digest.
//
// Every thing Mount creates is announced first through Spec.Before, so a
// caller can list it in a state file for gc; the loop device is attached
// with LO_FLAGS_AUTOCLEAR, so it goes by itself once the filesystem is
// unmounted and no descriptor holds it. Unmount undoes it all.
package wsquota

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Inode budget defaults: one inode per BytesPerInode of disk (ext4's own
// ratio for large filesystems), at least MinInodes.
const (
	BytesPerInode = 16 << 10
	MinInodes     = 1024
	// InodeSize is the on-disk inode size; 256 keeps nanosecond and
	// post-2038 timestamps.
	InodeSize = 256
)

// FSType is the filesystem the image holds.
const FSType = "ext4"

// MountFlags and MountData are how the workspace filesystem is mounted:
// no device files and no set-uid (jobs run scripts from the workspace, so
// exec stays), no background zeroing of inode tables (the image is
// sparse: they read as zeros already, and zeroing would write them out),
// and no cache flushes (nobarrier): the filesystem is scratch, read by the
// host through the mount and deleted with its image after the step, so
// nothing needs it on the disk, and each flush became an fsync of the
// image on the host's filesystem (mount 1.5-2.8 ms and unmount 2.0-2.2 ms
// before, 1.0 and 0.8-1.0 ms after, medians of 30, strace -T).
const (
	MountFlags = unix.MS_NODEV | unix.MS_NOSUID
	MountData  = "noinit_itable,nobarrier"
)

// ErrNoMkfs and ErrNoLoop mark a host that lacks what the quota needs.
var (
	ErrNoMkfs = errors.New("mkfs.ext4 not found: install e2fsprogs (Debian: apt-get install e2fsprogs)")
	ErrNoLoop = errors.New("no loop devices (/dev/loop-control is missing): load the loop module (modprobe loop) or, in a container, pass /dev/loop-control and /dev/loop* in")
)

// DefaultInodes is the inode budget of a workspace of the given size.
func DefaultInodes(bytes int64) int64 {
	n := bytes / BytesPerInode
	if n < MinInodes {
		n = MinInodes
	}
	return n
}

// Spec is one workspace filesystem.
type Spec struct {
	Image  string // the image file Mount creates; outside Dir, out of the job's reach
	Dir    string // the mount point: the (empty) workspace directory
	Bytes  int64  // the filesystem's size
	Inodes int64  // the inode budget; 0 takes DefaultInodes(Bytes)
	UID    int    // owner of the filesystem's root
	GID    int
	// Before, when set, is called with the loop device Mount is about to
	// attach (and then mount at Dir) before it does, so the caller can
	// record both for gc; an error stops Mount. It may be called again
	// with another device when the first was taken meanwhile.
	Before func(loop string) error
	// Templates, when set, makes the filesystem once per kind and copies
	// it; nil runs mkfs.ext4 for each Mount.
	Templates *Templates
}

func (s Spec) inodes() int64 {
	if s.Inodes > 0 {
		return s.Inodes
	}
	return DefaultInodes(s.Bytes)
}

// check refuses an inode budget whose inode tables would take more than
// half of the filesystem (mkfs.ext4 would fail, or leave little room).
func (s Spec) check() error {
	if n := s.inodes(); n*InodeSize > s.Bytes/2 {
		return fmt.Errorf("%d inodes take %d bytes of inode tables, more than half of the %d-byte filesystem: lower the inode budget (diskInodes) to at most %d or raise its size (disk)",
			n, n*InodeSize, s.Bytes, s.Bytes/2/InodeSize)
	}
	return nil
}

// MkfsArgs is the command line that makes the filesystem in s.Image:
// quiet, no journal (a scratch filesystem that dies with the run), no
// reserved blocks and no room for online growth (the job gets all of
// Bytes), the inode budget, inode tables left to read as the sparse
// file's zeros, no discard of the fresh file, and the job's root. The
// filesystem's UUID and directory hash seed are fixed (FSUUID, HashSeed)
// instead of random, so that the order in which a job lists a large
// directory is the same in every run and on every host (a rerun compares
// outputs bit for bit).
func MkfsArgs(mkfs string, s Spec) []string {
	return []string{
		mkfs, "-q", "-F",
		"-O", "^has_journal,^resize_inode",
		"-m", "0",
		"-N", strconv.FormatInt(s.inodes(), 10),
		"-I", strconv.Itoa(InodeSize),
		"-U", FSUUID,
		"-E", fmt.Sprintf("lazy_itable_init=1,nodiscard,root_owner=%d:%d,hash_seed=%s", s.UID, s.GID, HashSeed),
		s.Image,
	}
}

// FSUUID and HashSeed are every workspace filesystem's UUID and directory
// hash seed (MkfsArgs).
const (
	FSUUID   = "a5b0c0de-0000-4000-8000-000000000001"
	HashSeed = "a5b0c0de-0000-4000-8000-000000000002"
)

// mkfsFormat names the form of MkfsArgs' command line; it is part of a
// template's key, so that templates made by an older form are neither
// used nor kept (GCTemplates).
const mkfsFormat = "2"

// FindMkfs returns the path of mkfs.ext4, looking in PATH and then in
// /usr/sbin and /sbin (not always in a non-login PATH).
func FindMkfs() (string, error) {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(d, "mkfs.ext4")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", ErrNoMkfs
}

// Quota is a mounted workspace filesystem.
type Quota struct {
	Spec
	Loop string // the loop device, /dev/loopN

	created, mounted bool // the image, the mount: what Unmount undoes
}

// Mount makes s's filesystem and mounts it at s.Dir: image, mkfs, loop
// device, mount, in that order. On error, what it made is undone.
func Mount(ctx context.Context, s Spec) (q *Quota, err error) {
	if s.Bytes <= 0 {
		return nil, fmt.Errorf("workspace quota for %s: size %d, want a positive number of bytes", s.Dir, s.Bytes)
	}
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("workspace quota for %s: %w", s.Dir, err)
	}
	if s.Image, err = filepath.Abs(s.Image); err != nil {
		return nil, err
	}
	if s.Dir, err = filepath.Abs(s.Dir); err != nil {
		return nil, err
	}
	mkfs, err := FindMkfs()
	if err != nil {
		return nil, fmt.Errorf("workspace quota for %s: %w", s.Dir, err)
	}
	if _, err := os.Stat(LoopControl); err != nil {
		return nil, fmt.Errorf("workspace quota for %s: %w", s.Dir, ErrNoLoop)
	}
	q = &Quota{Spec: s}
	defer func() {
		if err != nil {
			err = fmt.Errorf("workspace quota for %s: %w", s.Dir, err)
			if uerr := q.Unmount(); uerr != nil {
				err = errors.Join(err, uerr)
			}
			q = nil
		}
	}()
	f, err := os.OpenFile(s.Image, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return q, fmt.Errorf("create image: %w", err)
	}
	q.created = true
	defer f.Close()
	if err := f.Truncate(s.Bytes); err != nil {
		return q, fmt.Errorf("size image: %w", err)
	}
	if s.Templates != nil {
		if err := s.Templates.copyTo(ctx, mkfs, s, f); err != nil {
			return q, err
		}
	} else {
		argv := MkfsArgs(mkfs, s)
		if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return q, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, bytes.TrimSpace(out))
		}
	}
	loop, err := attach(f, s.Image, s.Before)
	if err != nil {
		return q, err
	}
	q.Loop = loop.Name()
	// Until the mount holds the device, this descriptor does: closing it
	// unmounted would detach the device (autoclear).
	defer loop.Close()
	if err := unix.Mount(q.Loop, s.Dir, FSType, MountFlags, MountData); err != nil {
		return q, fmt.Errorf("mount %s at %s: %w", q.Loop, s.Dir, err)
	}
	q.mounted = true
	// mkfs's lost+found is for fsck, which a scratch filesystem never
	// sees: the job gets an empty workspace, as without a quota.
	if err := os.Remove(filepath.Join(s.Dir, "lost+found")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return q, fmt.Errorf("remove lost+found: %w", err)
	}
	if err := os.Chmod(s.Dir, 0o700); err != nil {
		return q, err
	}
	return q, nil
}

// Unmount unmounts the filesystem, detaches the loop device and removes the
// image. Parts already gone are not errors.
func (q *Quota) Unmount() error {
	var errs []error
	if q.mounted {
		if err := UnmountDir(q.Dir); err != nil {
			return err // the image stays for gc while its filesystem is mounted
		}
		q.mounted = false
	}
	if q.Loop != "" {
		if err := Detach(q.Loop, q.Image); err != nil {
			errs = append(errs, err)
		}
	}
	if q.created {
		if err := os.Remove(q.Image); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove workspace image: %w", err))
		}
		q.created = false
	}
	return errors.Join(errs...)
}

// UnmountDir unmounts what is mounted at dir, lazily (MNT_DETACH) when it
// is busy, never following a symlink. Nothing mounted there is not an
// error; a mount below dir is not touched.
func UnmountDir(dir string) error {
	err := unix.Unmount(dir, unix.UMOUNT_NOFOLLOW)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(dir, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH)
	}
	switch {
	case err == nil, errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
		// EINVAL: dir is not a mount point.
		return nil
	}
	return fmt.Errorf("unmount workspace %s: %w", dir, err)
}
