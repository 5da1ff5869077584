package wsquota

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"golang.org/x/sys/unix"
)

func TestDefaultInodes(t *testing.T) {
	for _, c := range []struct{ bytes, want int64 }{
		{1 << 20, MinInodes},
		{16 << 20, MinInodes},
		{32 << 20, 2048},
		{1 << 30, 65536},
		{10 << 30, 655360},
	} {
		if got := DefaultInodes(c.bytes); got != c.want {
			t.Errorf("DefaultInodes(%d) = %d, want %d", c.bytes, got, c.want)
		}
	}
}

func TestMkfsArgs(t *testing.T) {
	s := Spec{Image: "/r/steps/a/workspace.img", Bytes: 1 << 30, UID: 65534, GID: 65534}
	want := []string{"/sbin/mkfs.ext4", "-q", "-F", "-O", "^has_journal,^resize_inode", "-m", "0",
		"-N", "65536", "-I", "256", "-E", "lazy_itable_init=1,nodiscard,root_owner=65534:65534",
		"/r/steps/a/workspace.img"}
	if got := MkfsArgs("/sbin/mkfs.ext4", s); !reflect.DeepEqual(got, want) {
		t.Errorf("MkfsArgs =\n%q\nwant\n%q", got, want)
	}
	s.Inodes = 5000
	if got := MkfsArgs("mkfs.ext4", s); got[8] != "5000" {
		t.Errorf("MkfsArgs with Inodes 5000: -N %s", got[8])
	}
}

func TestInodeBudgetFits(t *testing.T) {
	for _, c := range []struct {
		bytes, inodes int64
		ok            bool
	}{
		{1 << 20, 0, true}, // the default at the smallest disk
		{1 << 20, 2048, true},
		{1 << 20, 2049, false},
		{1 << 30, 1 << 21, true},
		{16 << 20, 100000, false},
	} {
		err := Spec{Bytes: c.bytes, Inodes: c.inodes}.check()
		if (err == nil) != c.ok {
			t.Errorf("check(%d bytes, %d inodes) = %v, want ok %v", c.bytes, c.inodes, err, c.ok)
		}
	}
}

func TestDetachRefusesOtherDevices(t *testing.T) {
	if err := Detach("/dev/sda", "/x.img"); err == nil {
		t.Error("Detach(/dev/sda) = nil, want an error")
	}
	// A loop device that does not exist serves nothing: nothing to do.
	if err := Detach("/dev/loop99999", "/x.img"); err != nil {
		t.Errorf("Detach of a missing device = %v", err)
	}
}

func TestUnmountDirNotMounted(t *testing.T) {
	testtier.Root(t)
	if err := UnmountDir(t.TempDir()); err != nil {
		t.Errorf("UnmountDir of a plain directory = %v, want nil", err)
	}
	if err := UnmountDir(filepath.Join(t.TempDir(), "missing")); err != nil {
		t.Errorf("UnmountDir of a missing directory = %v, want nil", err)
	}
}

// mountTest mounts a quota of size bytes on a fresh directory.
func mountTest(t *testing.T, bytes, inodes int64) *Quota {
	t.Helper()
	testtier.Root(t)
	testtier.Command(t, "root", "mkfs.ext4", "apt-get install e2fsprogs")
	if _, err := os.Stat(LoopControl); err != nil {
		testtier.Skip(t, "root", "no "+LoopControl)
	}
	dir := t.TempDir()
	ws := filepath.Join(dir, "workspace")
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	var before []string
	q, err := Mount(context.Background(), Spec{
		Image: filepath.Join(dir, "workspace.img"), Dir: ws, Bytes: bytes, Inodes: inodes, UID: 65534, GID: 65534,
		Before: func(loop string) error {
			// Announced before it is attached.
			if b, _ := BackingFile(loop); b != "" {
				t.Errorf("Before(%s): already attached to %s", loop, b)
			}
			before = append(before, loop)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := q.Unmount(); err != nil {
			t.Error(err)
		}
		assertGone(t, q)
	})
	if len(before) == 0 || before[len(before)-1] != q.Loop {
		t.Errorf("Before saw %q, want it to end with %s", before, q.Loop)
	}
	return q
}

// assertGone fails when q's mount, loop device or image is left.
func assertGone(t *testing.T, q *Quota) {
	t.Helper()
	if mounted(t, q.Dir) {
		t.Errorf("%s still mounted", q.Dir)
	}
	if b, _ := BackingFile(q.Loop); b == q.Image {
		t.Errorf("%s still serves %s", q.Loop, q.Image)
	}
	if _, err := os.Stat(q.Image); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("image %s left (%v)", q.Image, err)
	}
}

func mounted(t *testing.T, dir string) bool {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

func TestRootMount(t *testing.T) {
	q := mountTest(t, 16<<20, 0)
	var st unix.Stat_t
	if err := unix.Stat(q.Dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 65534 || st.Gid != 65534 || st.Mode&0o777 != 0o700 {
		t.Errorf("workspace root uid %d gid %d mode %o, want 65534 65534 700", st.Uid, st.Gid, st.Mode&0o777)
	}
	ents, err := os.ReadDir(q.Dir)
	if err != nil || len(ents) != 0 {
		t.Errorf("fresh workspace holds %v (%v), want nothing", ents, err)
	}
	var loop unix.Stat_t
	if err := unix.Stat(q.Loop, &loop); err != nil {
		t.Fatal(err)
	}
	if st.Dev != loop.Rdev {
		t.Errorf("workspace on device %d:%d, want the loop device %s (%d:%d)", unix.Major(st.Dev), unix.Minor(st.Dev), q.Loop, unix.Major(loop.Rdev), unix.Minor(loop.Rdev))
	}
	if b, err := BackingFile(q.Loop); err != nil || b != q.Image {
		t.Errorf("BackingFile(%s) = %q, %v, want %s", q.Loop, b, err, q.Image)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(q.Dir, &sfs); err != nil {
		t.Fatal(err)
	}
	total := int64(sfs.Blocks) * sfs.Bsize
	t.Logf("16 MiB workspace: %d bytes, %d free for the job, %d inodes", total, int64(sfs.Bavail)*sfs.Bsize, sfs.Files)
	if total > 16<<20 || total < 15<<20 {
		t.Errorf("filesystem of %d bytes for a 16 MiB quota", total)
	}
	for _, opt := range []string{"nodev", "nosuid"} {
		if !mountOption(t, q.Dir, opt) {
			t.Errorf("workspace not mounted %s", opt)
		}
	}
}

func mountOption(t *testing.T, dir, opt string) bool {
	t.Helper()
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(l); len(f) > 5 && f[4] == dir {
			for _, o := range strings.Split(f[5], ",") {
				if o == opt {
					return true
				}
			}
		}
	}
	return false
}

func TestRootBytesBounded(t *testing.T) {
	q := mountTest(t, 16<<20, 0)
	f, err := os.Create(filepath.Join(q.Dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for i := 0; i < 64; i++ {
		m, err := f.Write(buf)
		n += int64(m)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write: %v, want ENOSPC", err)
			}
			break
		}
	}
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	t.Logf("wrote %d bytes into a 16 MiB quota", n)
	if n >= 16<<20 {
		t.Errorf("wrote %d bytes, want fewer than 16 MiB", n)
	}
	// The host holds at most the image's size.
	var st unix.Stat_t
	if err := unix.Stat(q.Image, &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 > 16<<20 {
		t.Errorf("image takes %d bytes on the host", st.Blocks*512)
	}
}

func TestRootInodesBounded(t *testing.T) {
	q := mountTest(t, 64<<20, 2000)
	var created int
	var err error
	for created = 0; created < 10000; created++ {
		var f *os.File
		if f, err = os.Create(filepath.Join(q.Dir, fmt.Sprint(created))); err != nil {
			break
		}
		f.Close()
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("created %d files, then %v, want ENOSPC", created, err)
	}
	t.Logf("created %d files with an inode budget of 2000", created)
	if created > 2048 || created < 1900 {
		t.Errorf("created %d files with an inode budget of 2000", created)
	}
}

func TestRootMountFailsCleanly(t *testing.T) {
	testtier.Root(t)
	dir := t.TempDir()
	ws := filepath.Join(dir, "workspace")
	os.Mkdir(ws, 0o700)
	stop := errors.New("stop")
	var loop string
	_, err := Mount(context.Background(), Spec{Image: filepath.Join(dir, "img"), Dir: ws, Bytes: 4 << 20,
		Before: func(l string) error { loop = l; return stop }})
	if !errors.Is(err, stop) {
		t.Fatalf("Mount = %v, want the Before error", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "img")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("image left after a failed Mount (%v)", err)
	}
	if b, _ := BackingFile(loop); strings.HasPrefix(b, dir) {
		t.Errorf("%s left attached to %s", loop, b)
	}
	// An image that exists already is not the quota's to remove.
	if err := os.WriteFile(filepath.Join(dir, "img"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Mount(context.Background(), Spec{Image: filepath.Join(dir, "img"), Dir: ws, Bytes: 4 << 20}); err == nil {
		t.Fatal("Mount over an existing image succeeded")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "img")); err != nil || string(b) != "x" {
		t.Errorf("existing image changed: %q, %v", b, err)
	}
}

// TestRootTemplates: mounts of one kind share one mkfs; each copy is a
// working, empty, separate filesystem that takes little of the host's disk.
func TestRootTemplates(t *testing.T) {
	testtier.Root(t)
	if _, err := FindMkfs(); err != nil {
		testtier.Skip(t, "root", err.Error())
	}
	if _, err := os.Stat(LoopControl); err != nil {
		testtier.Skip(t, "root", "no "+LoopControl)
	}
	dir := t.TempDir()
	tm := &Templates{Dir: filepath.Join(dir, "templates")}
	var qs []*Quota
	for i := 0; i < 3; i++ {
		ws := filepath.Join(dir, fmt.Sprint("ws", i))
		if err := os.Mkdir(ws, 0o700); err != nil {
			t.Fatal(err)
		}
		q, err := Mount(context.Background(), Spec{Image: ws + ".img", Dir: ws, Bytes: 64 << 20, UID: 65534, GID: 65534, Templates: tm})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := q.Unmount(); err != nil {
				t.Error(err)
			}
			assertGone(t, q)
		})
		qs = append(qs, q)
	}
	if ents, _ := os.ReadDir(tm.Dir); len(ents) != 1 {
		t.Errorf("templates %v, want one for one kind of workspace", ents)
	}
	for i, q := range qs {
		if ents, err := os.ReadDir(q.Dir); err != nil || len(ents) != 0 {
			t.Errorf("workspace %d holds %v (%v), want nothing", i, ents, err)
		}
		if err := os.WriteFile(filepath.Join(q.Dir, "mine"), []byte(fmt.Sprint(i)), 0o600); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Stat(q.Image, &st); err != nil {
			t.Fatal(err)
		}
		if st.Blocks*512 > 4<<20 {
			t.Errorf("copy %d takes %d bytes of the host's disk, want a sparse copy", i, st.Blocks*512)
		}
	}
	for i, q := range qs {
		if b, err := os.ReadFile(filepath.Join(q.Dir, "mine")); err != nil || string(b) != fmt.Sprint(i) {
			t.Errorf("workspace %d reads %q, %v: the copies are not separate", i, b, err)
		}
	}
}
