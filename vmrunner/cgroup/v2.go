package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// v2 is a group in the unified hierarchy mounted at mount, handled by the
// library's cgroup2.Manager.
type v2 struct {
	mount string
	rel   string
	m     *cgroup2.Manager
}

// resourcesV2 are the cgroup2 resources that hold a group to l. Memory,
// pids and cpu are always present, even without a limit, so that the
// manager enables those controllers in the ancestors and Usage can read
// their figures; io only when throttling. memory.swap.max is set by newV2
// once it knows the kernel accounts swap.
func resourcesV2(l Limits) *cgroup2.Resources {
	r := &cgroup2.Resources{
		Memory: &cgroup2.Memory{},
		Pids:   &cgroup2.Pids{Max: l.PIDs},
		CPU:    &cgroup2.CPU{},
	}
	if l.MemoryBytes > 0 {
		m := l.MemoryBytes
		r.Memory.Max = &m
	}
	if l.VCPU > 0 {
		period := uint64(CPUPeriod.Microseconds())
		quota := int64(l.VCPU) * int64(period)
		r.CPU.Max = cgroup2.NewCPUMax(&quota, &period)
	}
	if l.IOReadBps > 0 || l.IOWriteBps > 0 {
		r.IO = &cgroup2.IO{}
		for _, d := range l.IODevices {
			if l.IOReadBps > 0 {
				r.IO.Max = append(r.IO.Max, cgroup2.Entry{Type: cgroup2.ReadBPS, Major: d.Major, Minor: d.Minor, Rate: uint64(l.IOReadBps)})
			}
			if l.IOWriteBps > 0 {
				r.IO.Max = append(r.IO.Max, cgroup2.Entry{Type: cgroup2.WriteBPS, Major: d.Major, Minor: d.Minor, Rate: uint64(l.IOWriteBps)})
			}
		}
	}
	return r
}

func newV2(mount, rel string, l Limits) (*v2, error) {
	// memory.max covers the group's TCP socket buffers as well (unlike
	// v1, where they need memory.kmem.tcp.limit_in_bytes), unless socket
	// accounting is switched off at boot.
	if l.MemoryBytes > 0 {
		if err := socketAccounting(); err != nil {
			return nil, err
		}
	}
	res := resourcesV2(l)
	ctrls := res.EnabledControllers()
	if !hasControllers(mount, ctrls...) {
		return nil, fmt.Errorf("the cgroup2 hierarchy at %s does not offer all of %v (see %s/cgroup.controllers)", mount, ctrls, mount)
	}
	// NewManager creates the group, enables the controllers in every
	// ancestor's cgroup.subtree_control and writes the limits.
	m, err := cgroup2.NewManager(mount, rel, res)
	if err != nil {
		return nil, err
	}
	g := &v2{mount: mount, rel: rel, m: m}
	// No swap on top of memory.max, where the kernel accounts swap: the
	// library has no API that says whether it does, so look for the file.
	if l.MemoryBytes > 0 && exists(filepath.Join(g.dir(), "memory.swap.max")) {
		zero := int64(0)
		if err := m.Update(&cgroup2.Resources{Memory: &cgroup2.Memory{Swap: &zero}}); err != nil {
			return nil, fmt.Errorf("set memory.swap.max to 0: %w", err)
		}
	}
	return g, nil
}

func openV2(mount, rel string) (*v2, error) {
	m, err := cgroup2.Load(rel, cgroup2.WithMountpoint(mount))
	if err != nil {
		return nil, err
	}
	return &v2{mount: mount, rel: rel, m: m}, nil
}

func (g *v2) version() string { return "v2" }
func (g *v2) dir() string     { return filepath.Join(g.mount, g.rel) }
func (g *v2) dirs() []string  { return []string{g.dir()} }

func (g *v2) add(pid int) error { return g.m.AddProc(uint64(pid)) }

// fd opens the group's directory for clone3's CLONE_INTO_CGROUP; the
// library has no API for that descriptor.
func (g *v2) fd() (*os.File, error) {
	fd, err := unix.Open(g.dir(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), g.dir()), nil
}

func (g *v2) procs() ([]int, error) {
	ps, err := g.m.Procs(false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(ps))
	for _, p := range ps {
		out = append(out, int(p))
	}
	sort.Ints(out)
	return out, nil
}

func (g *v2) usage() (Usage, int64, error) {
	var u Usage
	m, err := g.m.StatFiltered(cgroup2.StatPids | cgroup2.StatCPU | cgroup2.StatMemory | cgroup2.StatMemoryEvents)
	if err != nil {
		return u, 0, err
	}
	if m.Memory != nil {
		// memory.peak is Linux 5.19+ (0 when missing); before it only
		// memory.current exists.
		u.PeakMemoryBytes = int64(m.Memory.MaxUsage)
		u.MemoryBytes = int64(m.Memory.Usage)
		if u.PeakMemoryBytes == 0 {
			u.PeakMemoryBytes = int64(m.Memory.Usage)
		}
	}
	if m.CPU != nil {
		u.CPUTime = time.Duration(m.CPU.UsageUsec) * time.Microsecond
		u.ThrottledTime = time.Duration(m.CPU.ThrottledUsec) * time.Microsecond
	}
	if m.MemoryEvents != nil {
		u.OOMKills = int64(m.MemoryEvents.OomKill)
	}
	var cur int64
	if m.Pids != nil {
		cur = int64(m.Pids.Current)
	}
	// pids.peak (Linux 6.1+) is not in the library's PidsStat: read it
	// directly. Without it Group.Usage tracks the highest pids.current.
	if peak, err := readInt(filepath.Join(g.dir(), "pids.peak")); err == nil {
		u.PidsPeak = peak
	} else if !errors.Is(err, fs.ErrNotExist) {
		return u, 0, err
	}
	return u, cur, nil
}

// kill is the library's Kill: cgroup.kill (Linux 5.14+), or else freeze,
// SIGKILL every process and thaw.
func (g *v2) kill() error {
	if !exists(g.dir()) {
		return nil
	}
	return g.m.Kill()
}

// remove is the library's Delete: it refuses while processes are left and
// retries while the kernel reports the directory busy.
func (g *v2) remove() error {
	if !exists(g.dir()) {
		return nil
	}
	return g.m.Delete()
}
