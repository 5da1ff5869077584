package netns

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/vishvananda/netlink"
)

func sha256Sum(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

func TestValidName(t *testing.T) {
	for _, bad := range []string{"", ".", "..", "a/b", "a\x00"} {
		if validName(bad) == nil {
			t.Errorf("validName(%q) accepted", bad)
		}
	}
}

func TestTBF(t *testing.T) {
	q, err := tbf(3, 8_000_000) // 1 MB/s
	if err != nil {
		t.Fatal(err)
	}
	if q.Rate != 1_000_000 || q.LinkIndex != 3 || q.Parent != netlink.HANDLE_ROOT {
		t.Errorf("tbf = %+v", q)
	}
	// 16 KiB burst (10 ms of 1 MB/s is less) expressed in ticks, not bytes.
	if want := netlink.Xmittime(1_000_000, 16<<10); q.Buffer != want {
		t.Errorf("buffer = %d ticks, want %d", q.Buffer, want)
	}
	if want := uint32(1_000_000*50/1000 + 16<<10); q.Limit != want {
		t.Errorf("limit = %d, want %d", q.Limit, want)
	}
	if _, err := tbf(3, 7); err == nil {
		t.Error("TBF accepted a rate below one byte per second")
	}
}

// testName returns a namespace name no other test run uses.
func testName(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return Prefix + hex.EncodeToString(b) + "-t"
}

// threadNS returns the inode of the calling thread's network namespace; the
// caller holds the OS thread locked.
func threadNS(t *testing.T) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func create(t *testing.T) *NS {
	t.Helper()
	ns, err := Create(testName(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.Delete(); err != nil {
			t.Error(err)
		}
	})
	return ns
}

func TestCreateDelete(t *testing.T) {
	testtier.Root(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := threadNS(t)

	name := testName(t)
	ns, err := Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if after := threadNS(t); after != before {
		t.Errorf("Create left the calling thread in netns %d, was %d", after, before)
	}
	if ns.Path() != filepath.Join(RunDir, name) || ns.Name() != name {
		t.Errorf("Path/Name = %q/%q", ns.Path(), ns.Name())
	}
	var st syscall.Stat_t
	if err := syscall.Stat(ns.Path(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Ino == before {
		t.Error("the named netns is the host's")
	}
	if _, err := Create(name); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second Create(%q) = %v, want fs.ErrExist", name, err)
	}
	if _, err := os.Stat(ns.Path()); err != nil {
		t.Errorf("a failed duplicate Create removed the first namespace: %v", err)
	}

	names, err := List(name)
	if err != nil || len(names) != 1 || names[0] != name {
		t.Errorf("List(%q) = %v, %v", name, names, err)
	}

	h, err := ns.Handle()
	if err != nil {
		t.Fatal(err)
	}
	links, err := h.LinkList()
	h.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(links) != 1 || links[0].Attrs().Name != "lo" {
		var got []string
		for _, l := range links {
			got = append(got, l.Attrs().Name)
		}
		t.Fatalf("links in new netns = %v, want only lo", got)
	}
	if links[0].Attrs().Flags&net.FlagUp == 0 {
		t.Error("lo is not up")
	}

	if err := ns.Do(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if after := threadNS(t); after != before {
		t.Errorf("Do left the calling thread in netns %d, was %d", after, before)
	}

	if err := ns.Delete(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(ns.Path()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Delete %s: %v", ns.Path(), err)
	}
	if names, _ := List(name); len(names) != 0 {
		t.Errorf("List after Delete = %v", names)
	}
	if err := ns.Delete(); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if err := DeleteByName(name); err != nil {
		t.Errorf("DeleteByName of a deleted netns: %v", err)
	}
	if err := ns.Do(func() error { return nil }); err == nil {
		t.Error("Do on a deleted netns succeeded")
	}
	if after := threadNS(t); after != before {
		t.Errorf("thread netns changed to %d, was %d", after, before)
	}
}

func TestDeleteByNameUnmounted(t *testing.T) {
	testtier.Root(t)
	ns := create(t)
	// The bind mount is gone but the file is left, as after a crash between
	// the two steps of a delete.
	if err := syscall.Unmount(ns.Path(), syscall.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if err := DeleteByName(ns.Name()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(ns.Path()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s left: %v", ns.Path(), err)
	}
}

func TestHostLoopbackUnreachable(t *testing.T) {
	testtier.Root(t)
	ns := create(t)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	addr := l.Addr().String()
	// The listener answers from the host's namespace, so a refusal below
	// comes from the namespace boundary.
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s from the host: %v", addr, err)
	}
	c.Close()

	err = ns.Do(func() error {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err == nil {
		t.Fatalf("dial %s from inside netns %s reached the host's listener", addr, ns.Name())
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial from inside = %v, want connection refused by the namespace's own lo", err)
	}
}

func TestCreateTap(t *testing.T) {
	testtier.Root(t)
	ns := create(t)
	name := "asbt" + hex.EncodeToString(sha256Sum(ns.Name())[:4])

	link, err := ns.CreateTap(Tap{Name: name, Owner: 1000, Group: 1001, MultiQueue: true, VnetHdr: true})
	if err != nil {
		t.Fatal(err)
	}
	tap, ok := link.(*netlink.Tuntap)
	if !ok {
		t.Fatalf("link is %T, want *netlink.Tuntap", link)
	}
	if tap.Mode != netlink.TUNTAP_MODE_TAP {
		t.Errorf("mode = %v, want tap", tap.Mode)
	}
	if tap.Flags&netlink.TUNTAP_VNET_HDR == 0 || tap.Flags&netlink.TUNTAP_MULTI_QUEUE == 0 || tap.Flags&netlink.TUNTAP_NO_PI == 0 {
		t.Errorf("flags = %v, want vnet_hdr, multi_queue, no_pi", tap.Flags)
	}
	if tap.Owner != 1000 || tap.Group != 1001 {
		t.Errorf("owner %d group %d, want 1000 and 1001", tap.Owner, tap.Group)
	}

	h, err := ns.Handle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.LinkByName(name); err != nil {
		t.Errorf("tap %s not in netns %s: %v", name, ns.Name(), err)
	}
	if _, err := netlink.LinkByName(name); err == nil {
		t.Errorf("tap %s exists in the host's netns", name)
	} else if !errors.As(err, new(netlink.LinkNotFoundError)) {
		t.Errorf("look up tap in the host: %v", err)
	}

	if err := ns.SetBandwidth(name, 80_000_000); err != nil {
		t.Fatal(err)
	}
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := h.QdiscList(l)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, q := range qs {
		if tbf, ok := q.(*netlink.Tbf); ok && tbf.Parent == netlink.HANDLE_ROOT {
			found = true
			if tbf.Rate != 10_000_000 {
				t.Errorf("tbf rate = %d bytes/s, want 10000000", tbf.Rate)
			}
		}
	}
	if !found {
		t.Errorf("no root tbf on %s: %v", name, qs)
	}

	if _, err := ns.CreateTap(Tap{Name: "a-name-longer-than-15"}); err == nil {
		t.Error("CreateTap accepted a 21-character name")
	}
}
