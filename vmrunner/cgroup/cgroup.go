// Package cgroup holds a step to its quotas: memory without swap (and its
// TCP socket buffers within the same bound), a pids limit, a CPU quota from its vCPUs and optional block IO throttling, and
// reads back what the step used.
//
// It is built on github.com/containerd/cgroups/v3 and supports both cgroup
// versions:
//
//   - v2 (the unified hierarchy, most hosts today) when the unified
//     hierarchy offers the memory, pids and cpu controllers, through
//     cgroup2.Manager;
//   - v1 otherwise, through cgroup1 with cgroup1.WithHierarchy limited to
//     the memory, pids, cpu, cpuacct and freezer hierarchies (plus blkio
//     for IO limits), never every mounted one. A hybrid host whose unified
//     hierarchy has no controllers, like the project's CI machine, uses v1.
//
// The library creates the groups with their resources, adds processes,
// reads the statistics, freezes, kills and deletes. A few things it has no
// API for are done on the files directly, each commented where it happens:
// pids.peak, whether the kernel accounts swap, the directory descriptor for
// clone, listing leftover groups for gc and removing the emptied parent
// directories of a group. Every operation works below a root directory, so
// the unit tests run the library against a fake cgroupfs.
//
// A group is named by a path such as /agentsandbox/RUNID/STEP that is the
// same in every hierarchy. New creates it and writes the limits; the child
// must be in it before any user code runs: on v2 start the child with
// SysProcAttr.UseCgroupFD and CgroupFD from FD; on v1 there is no such
// clone flag, so the caller holds the child (the jail's init waits on a
// pipe) until Add has placed it.
//
// Limits count what the kernel counts: pids.max counts threads, not
// processes (a Go program uses about five).
package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup2"
)

// Mountpoint is where the host's cgroup file systems are mounted.
const Mountpoint = "/sys/fs/cgroup"

// CPUPeriod is the CPU quota period; a step with N vCPUs gets N periods of
// CPU time per period.
const CPUPeriod = 100 * time.Millisecond

// Mode names the host's cgroup layout: "v2" (unified only), "hybrid" (v1
// controllers plus a unified mount), "v1" (legacy only) or "unavailable".
func Mode() string {
	switch cgroups.Mode() {
	case cgroups.Unified:
		return "v2"
	case cgroups.Hybrid:
		return "hybrid"
	case cgroups.Legacy:
		return "v1"
	default:
		return "unavailable"
	}
}

// Device names a block device by its major:minor numbers (see
// /sys/block/NAME/dev or DeviceOf).
type Device struct {
	Major, Minor int64
}

func (d Device) String() string { return fmt.Sprintf("%d:%d", d.Major, d.Minor) }

// Limits are the quotas of one group. A zero field sets no limit.
type Limits struct {
	// MemoryBytes caps memory; swap is not allowed on top (v1:
	// memory.memsw.limit_in_bytes = MemoryBytes when the kernel accounts
	// swap; v2: memory.swap.max = 0 when the file exists). TCP socket
	// buffers are held too: v2 charges them to memory.max; v1 charges
	// them only to memory.kmem.tcp.limit_in_bytes, set to MemoryBytes as
	// well. New refuses a memory limit where the kernel cannot charge
	// them (no kmem.tcp file on v1, cgroup.memory=nosocket).
	MemoryBytes int64
	// PIDs caps tasks: processes and threads.
	PIDs int64
	// VCPU is the CPU quota in whole CPUs: VCPU × CPUPeriod per CPUPeriod.
	VCPU int
	// IOReadBps and IOWriteBps throttle each of IODevices. The kernel only
	// throttles named devices, so an IO limit without IODevices is an error.
	IOReadBps, IOWriteBps int64
	IODevices             []Device
}

func (l Limits) validate() error {
	if l.MemoryBytes < 0 || l.PIDs < 0 || l.VCPU < 0 || l.IOReadBps < 0 || l.IOWriteBps < 0 {
		return fmt.Errorf("negative limit in %+v", l)
	}
	if (l.IOReadBps > 0 || l.IOWriteBps > 0) && len(l.IODevices) == 0 {
		return errors.New("io limits need the block devices to throttle: set Limits.IODevices (cgroup.DeviceOf gives the device holding a path)")
	}
	return nil
}

// ErrNoFD is returned by FD on cgroup v1, which cannot place a child at
// clone time.
var ErrNoFD = errors.New("cgroup v1 has no cgroup directory descriptor for clone: hold the child until Add has placed it")

// backend is one cgroup version's implementation. Every method works below
// a root directory, so tests can point it at a fake cgroupfs.
type backend interface {
	version() string
	dirs() []string // the group's directory in every hierarchy
	add(pid int) error
	fd() (*os.File, error)
	usage() (u Usage, pidsCurrent int64, err error)
	procs() ([]int, error)
	kill() error
	remove() error // the group's own directories; it must be empty
}

// Group is one cgroup in every hierarchy it uses.
type Group struct {
	path string
	b    backend

	// rmdir removes one emptied parent directory; tests on a fake
	// cgroupfs replace it.
	rmdir func(string) error

	mu       sync.Mutex
	pidsSeen int64
	deleted  bool
}

// deleteTimeout bounds how long Delete waits for killed processes to leave.
var deleteTimeout = 5 * time.Second

// New creates the group at path (like /agentsandbox/RUNID/STEP, the same in
// every hierarchy) with limits l, choosing v2 when the unified hierarchy has
// the controllers and v1 otherwise. A group left at path by an earlier run is
// reused and its limits rewritten.
func New(p string, l Limits) (*Group, error) {
	if err := checkPath(p); err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	if err := l.validate(); err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", p, err)
	}
	ver, root, err := detect()
	if err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", p, err)
	}
	return newAt(ver, root, p, l)
}

// newAt creates the group below root, the unified mount (v2) or the
// directory of the controller mounts (v1).
//
// Another group's Delete may prune a parent this one is being made in
// (/agentsandbox/RUN, or /agentsandbox, left empty for a moment by another
// run or step), so that the mkdir of the next level fails with ENOENT:
// the group is then made again, a few times.
func newAt(ver, root, p string, l Limits) (*Group, error) {
	var err error
	for attempt := 1; ; attempt++ {
		var b backend
		if ver == "v2" {
			b, err = newV2(root, p, l)
		} else {
			b, err = newV1(root, p, l)
		}
		if err == nil {
			return &Group{path: p, b: b, rmdir: rmdirCgroup}, nil
		}
		raced := errors.Is(err, fs.ErrNotExist)
		// Remove what was made before the failure.
		if g, oerr := openAt(ver, root, p); oerr == nil {
			err = errors.Join(err, g.Delete())
		}
		if !raced || attempt == createAttempts {
			return nil, fmt.Errorf("create cgroup %s (%s): %w", p, ver, err)
		}
	}
}

// createAttempts bounds how often New makes a group again after a parent
// was pruned under it.
const createAttempts = 5

// open returns a handle on an existing (or already removed) group without
// writing limits; List and DeleteByPath use it.
func open(p string) (*Group, error) {
	if err := checkPath(p); err != nil {
		return nil, err
	}
	ver, root, err := detect()
	if err != nil {
		return nil, err
	}
	return openAt(ver, root, p)
}

func openAt(ver, root, p string) (*Group, error) {
	var b backend
	var err error
	if ver == "v2" {
		b, err = openV2(root, p)
		if err != nil {
			return nil, err
		}
	} else {
		b, err = openV1(root, p)
		if err != nil {
			return nil, err
		}
	}
	return &Group{path: p, b: b, rmdir: rmdirCgroup}, nil
}

func checkPath(p string) error {
	if !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" {
		return fmt.Errorf("invalid cgroup path %q: want a clean absolute path below the root such as /agentsandbox/RUN/STEP", p)
	}
	return nil
}

// detect chooses the cgroup version and the directory its hierarchies live
// in: the unified mount for v2, the directory of the per-controller mounts
// for v1.
func detect() (version, root string, err error) {
	switch cgroups.Mode() {
	case cgroups.Unified:
		return "v2", Mountpoint, nil
	case cgroups.Hybrid:
		unified := filepath.Join(Mountpoint, "unified")
		if hasControllers(unified, "memory", "pids", "cpu") {
			return "v2", unified, nil
		}
		return "v1", Mountpoint, nil
	case cgroups.Legacy:
		return "v1", Mountpoint, nil
	}
	return "", "", fmt.Errorf("no cgroup file system mounted at %s: mount cgroup2 there (or the v1 controllers below it)", Mountpoint)
}

// hasControllers reports whether the cgroup2 hierarchy at mount offers all
// of the named controllers.
func hasControllers(mount string, want ...string) bool {
	m, err := cgroup2.Load("/", cgroup2.WithMountpoint(mount))
	if err != nil {
		return false
	}
	ctrls, err := m.RootControllers()
	if err != nil {
		return false
	}
	have := map[string]bool{}
	for _, c := range ctrls {
		have[c] = true
	}
	for _, c := range want {
		if !have[c] {
			return false
		}
	}
	return true
}

// Path is the group's path below each hierarchy's root.
func (g *Group) Path() string { return g.path }

// Version is "v1" or "v2".
func (g *Group) Version() string { return g.b.version() }

// Dirs are the group's directories, one per hierarchy (one on v2).
func (g *Group) Dirs() []string { return g.b.dirs() }

// Add moves the process pid (all its threads) into the group in every
// hierarchy. Its later children start in the group.
func (g *Group) Add(pid int) error {
	if err := g.b.add(pid); err != nil {
		return fmt.Errorf("add pid %d to cgroup %s: %w", pid, g.path, err)
	}
	return nil
}

// FD opens the group's directory for SysProcAttr.UseCgroupFD/CgroupFD, so a
// child starts inside the group (v2 only; the caller closes the file after
// starting the child). On v1 it returns an error wrapping ErrNoFD: hold the
// child until Add.
func (g *Group) FD() (*os.File, error) {
	f, err := g.b.fd()
	if err != nil {
		return nil, fmt.Errorf("open cgroup %s: %w", g.path, err)
	}
	return f, nil
}

// Pids lists the processes in the group.
func (g *Group) Pids() ([]int, error) {
	p, err := g.b.procs()
	if err != nil {
		return nil, fmt.Errorf("list processes of cgroup %s: %w", g.path, err)
	}
	return p, nil
}

// Usage reads what the group used so far: peak memory, CPU time, pids peak,
// OOM kills and throttled time. PidsPeak is the kernel's pids.peak where the
// kernel has that file; otherwise it is the highest pids.current any Usage
// call on this Group has seen, so call Usage periodically for a useful
// figure there.
func (g *Group) Usage() (Usage, error) {
	u, cur, err := g.b.usage()
	if err != nil {
		return Usage{}, fmt.Errorf("read usage of cgroup %s: %w", g.path, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	u.Pids = cur
	if cur > g.pidsSeen {
		g.pidsSeen = cur
	}
	if u.PidsPeak < g.pidsSeen {
		u.PidsPeak = g.pidsSeen
	}
	return u, nil
}

// Kill sends SIGKILL to every process in the group: on v2 through
// cgroup.kill where the kernel has it (5.14+); otherwise it freezes the
// group, signals every pid and thaws it, so nothing forks past the kill.
// Processes leave the group once they have died; Delete waits for that.
func (g *Group) Kill() error {
	if err := g.b.kill(); err != nil {
		return fmt.Errorf("kill cgroup %s: %w", g.path, err)
	}
	return nil
}

// Delete kills what is left in the group, waits (bounded) until it is empty
// and removes its directory in every hierarchy, then the parents it leaves
// empty. Deleting a group that is gone is not an error.
func (g *Group) Delete() error {
	g.mu.Lock()
	deleted := g.deleted
	g.mu.Unlock()
	if deleted {
		return nil
	}
	if g.exists() {
		deadline := time.Now().Add(deleteTimeout)
		// Freezing and thawing an empty group costs milliseconds for
		// nothing, and an empty group needs no wait.
		pids, err := g.b.procs()
		if err != nil || len(pids) > 0 {
			if err := g.Kill(); err != nil {
				return fmt.Errorf("delete cgroup %s: %w", g.path, err)
			}
		}
		for err != nil || len(pids) > 0 {
			if pids, err = g.b.procs(); err != nil {
				return fmt.Errorf("delete cgroup %s: %w", g.path, err)
			}
			if len(pids) == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("delete cgroup %s: processes %v still in it %s after SIGKILL (stuck in uninterruptible sleep?); run `agentsandbox gc` once they are gone", g.path, pids, deleteTimeout)
			}
			time.Sleep(10 * time.Millisecond)
		}
		// The library retries a busy directory a few times itself; retry
		// that until the deadline.
		for {
			err := g.b.remove()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("delete cgroup %s: %w", g.path, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Also when the group itself is gone: a New that failed leaves its
	// parents behind.
	g.pruneParents()
	g.markDeleted()
	return nil
}

func (g *Group) markDeleted() {
	g.mu.Lock()
	g.deleted = true
	g.mu.Unlock()
}

func (g *Group) exists() bool {
	for _, d := range g.b.dirs() {
		if _, err := os.Lstat(d); err == nil {
			return true
		}
	}
	return false
}

// pruneParents removes the parents this group's path created
// (/agentsandbox/RUN, /agentsandbox) in every hierarchy once no sibling is
// left in them. The library deletes only the group's own directory.
func (g *Group) pruneParents() {
	for _, d := range g.b.dirs() {
		for range strings.Count(g.path, "/") - 1 {
			d = filepath.Dir(d)
			if err := g.rmdir(d); err != nil {
				break // not empty (ENOTEMPTY/EBUSY) or gone: both fine
			}
		}
	}
}

// rmdirCgroup removes a cgroup directory; cgroupfs allows rmdir of a
// directory that lists control files but no child groups or processes.
func rmdirCgroup(dir string) error { return syscall.Rmdir(dir) }

// List returns the paths of the groups below prefix (like /agentsandbox) in
// any hierarchy: the directories with no child group, so the groups of steps.
// gc passes each to DeleteByPath.
func List(prefix string) ([]string, error) {
	if err := checkPath(prefix); err != nil {
		return nil, fmt.Errorf("list cgroups: %w", err)
	}
	g, err := open(prefix)
	if err != nil {
		return nil, fmt.Errorf("list cgroups below %s: %w", prefix, err)
	}
	return g.leaves()
}

// leaves lists the group paths with no child group at or below g. The
// library has no API to enumerate groups, so this walks the directories.
func (g *Group) leaves() ([]string, error) {
	prefix := g.path
	seen := map[string]bool{}
	for _, d := range g.b.dirs() {
		root := strings.TrimSuffix(d, prefix)
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if !e.IsDir() {
				return nil
			}
			ents, err := os.ReadDir(p)
			if errors.Is(err, fs.ErrNotExist) {
				return filepath.SkipDir // removed while we walk: not a group any more
			}
			if err != nil {
				return err
			}
			for _, c := range ents {
				if c.IsDir() {
					return nil
				}
			}
			seen[strings.TrimPrefix(p, root)] = true
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("list cgroups below %s: %w", prefix, err)
		}
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

// DeleteByPath kills and removes the group at path in every hierarchy, like
// Group.Delete, for leftovers of a run that was killed; a missing group is
// not an error.
func DeleteByPath(p string) error {
	g, err := open(p)
	if err != nil {
		return fmt.Errorf("delete cgroup %s: %w", p, err)
	}
	return g.Delete()
}

// DeviceOf returns the whole block device holding the file system of path,
// for Limits.IODevices (the kernel throttles disks, not partitions).
func DeviceOf(p string) (Device, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return Device{}, fmt.Errorf("block device of %s: %w", p, err)
	}
	d := Device{Major: int64(major(st.Dev)), Minor: int64(minor(st.Dev))}
	sys := fmt.Sprintf("/sys/dev/block/%s", d)
	if _, err := os.Stat(sys); err != nil {
		return Device{}, fmt.Errorf("block device of %s: %s is not a block device (%w)", p, d, err)
	}
	if _, err := os.Stat(filepath.Join(sys, "partition")); err == nil {
		real, err := filepath.EvalSymlinks(sys)
		if err != nil {
			return Device{}, fmt.Errorf("block device of %s: %w", p, err)
		}
		parent, err := os.ReadFile(filepath.Join(filepath.Dir(real), "dev"))
		if err != nil {
			return Device{}, fmt.Errorf("block device of %s: disk of partition %s: %w", p, d, err)
		}
		return parseDevice(strings.TrimSpace(string(parent)))
	}
	return d, nil
}

func parseDevice(s string) (Device, error) {
	maj, min, ok := strings.Cut(s, ":")
	a, err1 := strconv.ParseInt(maj, 10, 64)
	b, err2 := strconv.ParseInt(min, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return Device{}, fmt.Errorf("parse device number %q: want MAJOR:MINOR", s)
	}
	return Device{Major: a, Minor: b}, nil
}

func major(dev uint64) uint64 { return ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xfffff000) }
func minor(dev uint64) uint64 { return (dev & 0xff) | ((dev >> 12) & 0xffffff00) }
