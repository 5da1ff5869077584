package wsquota

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
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
		"-N", "65536", "-I", "256", "-U", FSUUID,
		"-E", "lazy_itable_init=1,nodiscard,root_owner=65534:65534,hash_seed=" + HashSeed,
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
	if ents, _ := os.ReadDir(tm.Dir); len(ents) != 2 {
		t.Errorf("templates %v, want one for one kind of workspace and the lock", ents)
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

// needMkfs skips t where the host has no mkfs.ext4 (a failure in CI).
func needMkfs(t *testing.T) string {
	t.Helper()
	mkfs, err := FindMkfs()
	if err != nil {
		testtier.Skip(t, "pure", err.Error())
	}
	return mkfs
}

// sizedFile is a new file of size bytes, all holes.
func sizedFile(t *testing.T, p string, size int64) *os.File {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestTemplatesPersistAndConcurrent: ten users of one template directory
// at once (ten processes' Templates, as ten applies sharing a state
// directory) leave one whole template and no temporary file, each gets an
// exact copy, and a later user makes nothing: the template outlives them.
func TestTemplatesPersistAndConcurrent(t *testing.T) {
	mkfs := needMkfs(t)
	dir := t.TempDir()
	tdir := filepath.Join(dir, "templates")
	s := Spec{Bytes: 16 << 20, UID: 65534, GID: 65534}
	const n = 10
	errs := make([]error, n)
	files := make([]*os.File, n)
	var wg sync.WaitGroup
	for i := range n {
		files[i] = sizedFile(t, filepath.Join(dir, fmt.Sprint("ws", i, ".img")), s.Bytes)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = (&Templates{Dir: tdir}).copyTo(context.Background(), mkfs, s, files[i])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("copy %d: %v", i, err)
		}
	}
	ents, err := os.ReadDir(tdir)
	if err != nil || len(ents) != 2 || ents[1].Name() != LockFile || !strings.HasSuffix(ents[0].Name(), TemplateSuffix) {
		t.Fatalf("template directory holds %v (%v), want one template and the lock", ents, err)
	}
	tmpl := filepath.Join(tdir, ents[0].Name())
	want, err := dataDigest(mustOpen(t, tmpl), s.Bytes, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range files {
		if got, err := dataDigest(f, s.Bytes, nil); err != nil || got != want {
			t.Errorf("copy %d differs from the template (%v)", i, err)
		}
	}
	before, _ := os.Stat(tmpl)
	f := sizedFile(t, filepath.Join(dir, "later.img"), s.Bytes)
	if err := (&Templates{Dir: tdir}).copyTo(context.Background(), mkfs, s, f); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Stat(tmpl); !os.SameFile(before, after) {
		t.Error("a later user made the template again")
	}
}

func mustOpen(t *testing.T, p string) *os.File {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestTornTemplateIsMadeAgain: a template whose data, size or trailer is
// not what its trailer says is never copied; it is made again and the copy
// is whole.
func TestTornTemplateIsMadeAgain(t *testing.T) {
	mkfs := needMkfs(t)
	s := Spec{Bytes: 16 << 20, UID: 65534, GID: 65534}
	for _, c := range []struct {
		name string
		tear func(t *testing.T, p string)
	}{
		{"data", func(t *testing.T, p string) {
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("torn"), 1024+0x40); err != nil { // inside the superblock
				t.Fatal(err)
			}
		}},
		{"truncated", func(t *testing.T, p string) {
			if err := os.Truncate(p, s.Bytes/2); err != nil {
				t.Fatal(err)
			}
		}},
		{"no-trailer", func(t *testing.T, p string) {
			if err := os.Truncate(p, s.Bytes); err != nil {
				t.Fatal(err)
			}
		}},
		{"empty", func(t *testing.T, p string) {
			if err := os.Truncate(p, 0); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			tm := &Templates{Dir: filepath.Join(dir, "templates")}
			if err := tm.copyTo(context.Background(), mkfs, s, sizedFile(t, filepath.Join(dir, "a.img"), s.Bytes)); err != nil {
				t.Fatal(err)
			}
			k, err := key(mkfs, s)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(tm.Dir, k+TemplateSuffix)
			c.tear(t, p)
			f := sizedFile(t, filepath.Join(dir, "b.img"), s.Bytes)
			if err := (&Templates{Dir: tm.Dir}).copyTo(context.Background(), mkfs, s, f); err != nil {
				t.Fatal(err)
			}
			if err := copyTemplate(sizedFile(t, filepath.Join(dir, "c.img"), s.Bytes), p, s.Bytes); err != nil {
				t.Errorf("the template was not made again: %v", err)
			}
			want, _ := dataDigest(mustOpen(t, p), s.Bytes, nil)
			if got, err := dataDigest(f, s.Bytes, nil); err != nil || got != want {
				t.Errorf("the copy is not the new template (%v)", err)
			}
		})
	}
}

// TestGCTemplates: gc keeps whole templates of the host's mkfs and a
// temporary file of a live process, and removes the rest.
func TestGCTemplates(t *testing.T) {
	mkfs := needMkfs(t)
	id, err := MkfsID(mkfs)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	whole := func(name string, size int64) {
		t.Helper()
		tr := append([]byte(trailerMagic), make([]byte, 8+32)...)
		binary.LittleEndian.PutUint64(tr[len(trailerMagic):], uint64(size))
		f := sizedFile(t, filepath.Join(dir, name), size)
		if _, err := f.WriteAt(tr, size); err != nil {
			t.Fatal(err)
		}
	}
	keep := []string{"4096-1024-1-1-" + id + ".img", fmt.Sprintf(".tmp-%d-abc-x.img", os.Getpid()), LockFile}
	whole(keep[0], 4096)
	sizedFile(t, filepath.Join(dir, keep[1]), 10)
	sizedFile(t, filepath.Join(dir, keep[2]), 0)
	gone := []string{"4096-1024-1-1-mkfs000000000000.img", "8192-1024-1-1-" + id + ".img", ".tmp-999999999-abc-x.img", "junk"}
	whole(gone[0], 4096)
	sizedFile(t, filepath.Join(dir, gone[1]), 8192) // no trailer
	sizedFile(t, filepath.Join(dir, gone[2]), 10)
	sizedFile(t, filepath.Join(dir, gone[3]), 10)
	removed, err := GCTemplates(dir, mkfs)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, g := range gone {
		want = append(want, "template "+filepath.Join(dir, g))
	}
	sort.Strings(want)
	sort.Strings(removed)
	if !slices.Equal(removed, want) {
		t.Errorf("removed %q, want %q", removed, want)
	}
	for _, k := range keep {
		if _, err := os.Stat(filepath.Join(dir, k)); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
	if removed, err := GCTemplates(filepath.Join(dir, "none"), mkfs); err != nil || len(removed) != 0 {
		t.Errorf("gc of a missing directory: %v, %v", removed, err)
	}
}
