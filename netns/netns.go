// Package netns creates and removes the network namespaces steps run in.
//
// Every step gets its own named network namespace, bind-mounted at
// /run/netns/NAME exactly like `ip netns add NAME` does, so `ip netns list`,
// `ip -n NAME ...` and `ip netns exec` see it. A new namespace holds only the
// loopback device, which Create brings up: that is all `network: none` gives a
// step. Nothing in this package opens a route out of the namespace.
//
// SetupEgress (egress.go) turns a namespace into a step's network room: the
// addresses of package egress on a link of its own (namespace mode) or on
// the VM's tap, and one nftables table that redirects every TCP connection
// out to the transparent proxy listening inside the namespace, lets DNS
// reach the step's resolver on egress.Gateway, and drops and counts
// everything else. The rules go in through a netlink socket in the
// namespace; no thread of the caller enters it for that. Listen and
// ListenPacket open the proxy's and the resolver's sockets inside it, and
// OriginalDst tells the proxy where a redirected connection was going.
// The servers of the room live beside it, in netns/egress: the resolver
// (dns), the transparent proxy (proxy) and the gateway that starts the
// firewall and both in a namespace (EgressRoom is what it needs of one).
//
// Namespace switches are per OS thread. Create and Do run on a fresh goroutine
// locked to its thread and switch back before unlocking; if switching back
// fails, they leave the goroutine locked so that Go discards the thread
// instead of reusing one stuck in the wrong namespace. The calling goroutine's
// thread is never switched.
//
// The package needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN).
package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RunDir is where iproute2 and this package keep the bind mounts that name
// network namespaces.
const RunDir = "/run/netns"

// Prefix starts the name of every step's network namespace
// (vmrunner/hoststate.NetnsName names them); tests list leftovers with it.
const Prefix = "asb-"

// validName reports whether name can be a file in RunDir.
func validName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || len(name) > 255 {
		return fmt.Errorf("invalid network namespace name %q: use a plain file name such as hoststate.NetnsName returns", name)
	}
	return nil
}

// NS is an open named network namespace.
type NS struct {
	name   string
	handle vnetns.NsHandle
}

// Name is the namespace's name in RunDir.
func (n *NS) Name() string { return n.name }

// Path is the bind mount that names the namespace, /run/netns/NAME; pass it
// to setns(2) or `nsenter --net=PATH`.
func (n *NS) Path() string { return filepath.Join(RunDir, n.name) }

// Fd is an open descriptor of the namespace, valid until Close.
func (n *NS) Fd() int { return int(n.handle) }

// Create makes the named network namespace NAME, bind-mounts it at
// /run/netns/NAME and brings its loopback device up. It fails with an error
// wrapping fs.ErrExist when the name is taken. The calling thread stays in
// its own namespace.
func Create(name string) (*NS, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if err := prepareRunDir(); err != nil {
		return nil, fmt.Errorf("create netns %q: %w", name, err)
	}
	p := filepath.Join(RunDir, name)
	if _, err := os.Lstat(p); err == nil {
		return nil, fmt.Errorf("create netns %q: %s: %w", name, p, fs.ErrExist)
	}

	type result struct {
		h   vnetns.NsHandle
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := vnetns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("open current netns: %w", err)}
			return
		}
		defer orig.Close()
		h, err := vnetns.NewNamed(name)
		if err == nil {
			// The thread is in the new namespace: bring lo up from here
			// with one route socket, instead of a handle that enters the
			// namespace again for each netlink family.
			if lerr := loUp(); lerr != nil {
				err = fmt.Errorf("bring lo up: %w", lerr)
				h.Close()
			}
		}
		if rerr := vnetns.Set(orig); rerr != nil {
			if err == nil {
				h.Close()
			}
			ch <- result{err: fmt.Errorf("switch thread back to its netns: %w", rerr)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{h: h, err: err}
	}()
	r := <-ch
	if r.err != nil {
		// NewNamed leaves the file (and possibly the mount) behind on
		// failure; a name another process took meanwhile is not ours.
		if !errors.Is(r.err, fs.ErrExist) {
			_ = DeleteByName(name)
		}
		return nil, fmt.Errorf("create netns %q: %w", name, r.err)
	}
	ns := &NS{name: name, handle: r.h}
	return ns, nil
}

// prepareRunDir makes RunDir a shared mount point, as iproute2 does, so that
// namespaces added or deleted later propagate to mount namespaces cloned from
// the host's (a jail makes its own copy private anyway).
// loUp sets the loopback device of the calling thread's network namespace
// up, through one NETLINK_ROUTE socket opened in that namespace.
func loUp() error {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	return h.LinkSetUp(lo)
}

func prepareRunDir() error {
	if err := os.MkdirAll(RunDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", RunDir, err)
	}
	err := unix.Mount("", RunDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("make %s a shared mount: %w", RunDir, err)
	}
	// Not a mount point yet: bind it onto itself first, like iproute2.
	if err := unix.Mount(RunDir, RunDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s onto itself: %w", RunDir, err)
	}
	if err := unix.Mount("", RunDir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s a shared mount: %w", RunDir, err)
	}
	return nil
}

// Handle returns a netlink handle whose sockets live in the namespace. It
// does not switch any thread. The caller closes it. Note that a tuntap device
// added through it lands in the calling thread's namespace: use CreateTap.
func (n *NS) Handle() (*netlink.Handle, error) {
	if !n.handle.IsOpen() {
		return nil, fmt.Errorf("netlink handle for netns %q: namespace is closed", n.name)
	}
	// Links, addresses, routes and qdiscs are all rtnetlink: one route
	// socket, not one per family the library knows.
	h, err := netlink.NewHandleAt(n.handle, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink handle for netns %q: %w", n.name, err)
	}
	return h, nil
}

// Do runs fn on an OS thread switched into the namespace and returns fn's
// error. Sockets and tun devices fn creates belong to the namespace.
// Goroutines fn starts run on other threads, in the caller's namespace. The
// thread is switched back afterwards; if that fails it is discarded.
func (n *NS) Do(fn func() error) error {
	if !n.handle.IsOpen() {
		return fmt.Errorf("run in netns %q: namespace is closed", n.name)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := vnetns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("run in netns %q: open current netns: %w", n.name, err)
			return
		}
		defer orig.Close()
		if err := vnetns.Set(n.handle); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("run in netns %q: enter: %w", n.name, err)
			return
		}
		ferr := fn()
		if err := vnetns.Set(orig); err != nil {
			// Leave the thread locked: Go ends it with this goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("run in netns %q: switch thread back: %w", n.name, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Close releases the open descriptor; the namespace stays while its bind
// mount or any process holds it.
func (n *NS) Close() error {
	if !n.handle.IsOpen() {
		return nil
	}
	err := n.handle.Close()
	n.handle = vnetns.None()
	if err != nil {
		return fmt.Errorf("close netns %q: %w", n.name, err)
	}
	return nil
}

// Delete closes the namespace and removes its name (unmount and remove the
// file). The kernel frees the namespace when no process is left in it.
// Delete is idempotent.
func (n *NS) Delete() error {
	cerr := n.Close()
	return errors.Join(cerr, DeleteByName(n.name))
}

// DeleteByName unmounts and removes /run/netns/NAME. A name that does not
// exist, or whose bind mount is already gone, is not an error.
func DeleteByName(name string) error {
	if err := validName(name); err != nil {
		return err
	}
	p := filepath.Join(RunDir, name)
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete netns %q: unmount %s: %w", name, p, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete netns %q: %w", name, err)
	}
	return nil
}

// List returns the sorted names in RunDir that start with prefix (all when
// prefix is empty); gc passes Prefix. A missing RunDir is an empty list.
func List(prefix string) ([]string, error) {
	ents, err := os.ReadDir(RunDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list network namespaces: %w", err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}
