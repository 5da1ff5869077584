package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// controllersV1 are the v1 hierarchies a group lives in, each mounted at
// ROOT/NAME. blkio is only needed for IO limits.
var controllersV1 = []string{"memory", "pids", "cpu", "cpuacct", "freezer", "blkio"}

// statsV1 are the hierarchies Usage reads. blkio is left out: its Stat reads
// /proc/partitions and a dozen blkio files for figures Usage does not report.
var statsV1 = []string{"memory", "pids", "cpu", "cpuacct"}

// needV1 are the hierarchies a new group with limits l is created in.
func needV1(l Limits) []string {
	need := []string{"memory", "pids", "cpu", "cpuacct", "freezer"}
	if l.IOReadBps > 0 || l.IOWriteBps > 0 {
		need = append(need, "blkio")
	}
	return need
}

// v1 is a group in the per-controller hierarchies below root, handled by the
// library's cgroup1 package with a hierarchy of just these controllers
// (cgroup1.WithHierarchy; the library's default touches every mounted one).
type v1 struct {
	root string
	rel  string
	// ctrl maps each controller to its group directory (Dirs, List, the
	// parents Delete prunes, pids.peak). Co-mounted controllers
	// (cpu,cpuacct) share one directory.
	ctrl map[string]string
	// cg is the group in every hierarchy it uses; nil when opened on a
	// group that does not exist (any more).
	cg cgroup1.Cgroup
	// stat is the same group in the statsV1 hierarchies only.
	stat cgroup1.Cgroup
}

// mountedV1 maps each of controllersV1 that is mounted below root to its
// mount directory, with symlinks (cpu -> cpu,cpuacct) resolved. The library
// would create plain directories in the tmpfs at root for a controller that
// is not mounted, so New checks this first.
func mountedV1(root string) map[string]string {
	m := map[string]string{}
	for _, c := range controllersV1 {
		mount := filepath.Join(root, c)
		if !exists(filepath.Join(mount, "cgroup.procs")) {
			continue
		}
		if real, err := filepath.EvalSymlinks(mount); err == nil {
			mount = real
		}
		m[c] = mount
	}
	return m
}

// subsystemV1 is the library's controller name, rooted at root.
func subsystemV1(root, name string) cgroup1.Subsystem {
	switch cgroup1.Name(name) {
	case cgroup1.Memory:
		// Swap figures only where the kernel accounts swap; kmem figures
		// never (deprecated in the kernel, not reported here).
		return cgroup1.NewMemory(root, cgroup1.OptionalSwap(), cgroup1.IgnoreModules("kmem", "kmem.tcp"))
	case cgroup1.Pids:
		return cgroup1.NewPids(root)
	case cgroup1.Cpu:
		return cgroup1.NewCpu(root)
	case cgroup1.Cpuacct:
		return cgroup1.NewCpuacct(root)
	case cgroup1.Freezer:
		return cgroup1.NewFreezer(root)
	case cgroup1.Blkio:
		return cgroup1.NewBlkio(root)
	}
	panic("cgroup: no v1 subsystem " + name)
}

// hierarchyV1 is the cgroup1 hierarchy of just the named controllers.
func hierarchyV1(root string, names []string) cgroup1.Hierarchy {
	return func() ([]cgroup1.Subsystem, error) {
		out := make([]cgroup1.Subsystem, 0, len(names))
		for _, n := range names {
			out = append(out, subsystemV1(root, n))
		}
		return out, nil
	}
}

// resourcesV1 are the runtime-spec resources that hold a v1 group to l.
// swap says whether the kernel accounts swap (memory.memsw.*): then
// memory+swap equals memory, so no swap on top.
//
// TCP socket buffers get their own limit of the same size
// (memory.kmem.tcp.limit_in_bytes). On v1 the kernel charges a group's TCP
// buffers only once that file has been written, and then to a counter of
// its own, not to memory.limit_in_bytes: without it a job queues socket
// buffers in the host-wide TCP pool (tcp_mem) with no bound but the
// host's. A step can so hold at most twice its memory limit: its memory
// and as much again in TCP buffers.
func resourcesV1(l Limits, swap bool) *specs.LinuxResources {
	r := &specs.LinuxResources{}
	if l.MemoryBytes > 0 {
		m := l.MemoryBytes
		tcp := l.MemoryBytes
		r.Memory = &specs.LinuxMemory{Limit: &m, KernelTCP: &tcp}
		if swap {
			s := l.MemoryBytes
			r.Memory.Swap = &s
		}
	}
	if l.PIDs > 0 {
		p := l.PIDs
		r.Pids = &specs.LinuxPids{Limit: &p}
	}
	if l.VCPU > 0 {
		period := uint64(CPUPeriod.Microseconds())
		quota := int64(l.VCPU) * int64(period)
		r.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
	}
	if l.IOReadBps > 0 || l.IOWriteBps > 0 {
		r.BlockIO = &specs.LinuxBlockIO{}
		for _, d := range l.IODevices {
			dev := specs.LinuxBlockIODevice{Major: d.Major, Minor: d.Minor}
			if l.IOReadBps > 0 {
				r.BlockIO.ThrottleReadBpsDevice = append(r.BlockIO.ThrottleReadBpsDevice,
					specs.LinuxThrottleDevice{LinuxBlockIODevice: dev, Rate: uint64(l.IOReadBps)})
			}
			if l.IOWriteBps > 0 {
				r.BlockIO.ThrottleWriteBpsDevice = append(r.BlockIO.ThrottleWriteBpsDevice,
					specs.LinuxThrottleDevice{LinuxBlockIODevice: dev, Rate: uint64(l.IOWriteBps)})
			}
		}
	}
	return r
}

func newV1(root, rel string, l Limits) (*v1, error) {
	mounts := mountedV1(root)
	need := needV1(l)
	for _, c := range need {
		if _, ok := mounts[c]; !ok {
			return nil, fmt.Errorf("cgroup v1 controller %s is not mounted at %s", c, filepath.Join(root, c))
		}
	}
	// Whether the kernel accounts swap: the library has no API for it
	// (its OptionalSwap looks at the same kind of file, for stats only).
	swap := exists(filepath.Join(root, "memory", "memory.memsw.limit_in_bytes"))
	if l.MemoryBytes > 0 {
		if err := tcpAccountingV1(root); err != nil {
			return nil, err
		}
	}
	g := &v1{root: root, rel: rel, ctrl: map[string]string{}}
	for _, c := range need {
		g.ctrl[c] = filepath.Join(mounts[c], rel)
	}
	cg, err := cgroup1.New(cgroup1.StaticPath(rel), resourcesV1(l, swap), cgroup1.WithHierarchy(hierarchyV1(root, need)))
	if err != nil {
		return nil, err
	}
	g.cg = cg
	if g.stat, err = cgroup1.Load(cgroup1.StaticPath(rel), cgroup1.WithHierarchy(hierarchyV1(root, statsV1))); err != nil {
		return nil, err
	}
	return g, nil
}

// tcpAccountingV1 checks that the kernel can charge TCP socket buffers to
// a v1 memory group: memory.kmem.tcp.limit_in_bytes exists (deprecated
// since Linux 6.x, which logs so once, but still there), and socket
// accounting is not switched off on the kernel command line. Without it a
// step's TCP buffers would escape its memory limit, so New refuses.
func tcpAccountingV1(root string) error {
	f := filepath.Join(root, "memory", "memory.kmem.tcp.limit_in_bytes")
	if !exists(f) {
		return fmt.Errorf("the kernel has no %s: on cgroup v1 a step's TCP socket buffers could not be charged to its memory limit; boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1), which charges them to memory.max", f)
	}
	return socketAccounting()
}

// openV1 loads the group in every mounted hierarchy it exists in; the
// group's directories need not exist.
func openV1(root, rel string) (*v1, error) {
	mounts := mountedV1(root)
	g := &v1{root: root, rel: rel, ctrl: map[string]string{}}
	var names, stats []string
	for _, c := range controllersV1 {
		if m, ok := mounts[c]; ok {
			g.ctrl[c] = filepath.Join(m, rel)
			names = append(names, c)
		}
	}
	for _, c := range statsV1 {
		if _, ok := mounts[c]; ok {
			stats = append(stats, c)
		}
	}
	var err error
	if g.cg, err = loadV1(root, rel, names); err != nil {
		return nil, err
	}
	if g.stat, err = loadV1(root, rel, stats); err != nil {
		return nil, err
	}
	return g, nil
}

// loadV1 loads the group in the named hierarchies where its directory
// exists; nil when it exists in none.
func loadV1(root, rel string, names []string) (cgroup1.Cgroup, error) {
	if len(names) == 0 {
		return nil, nil
	}
	cg, err := cgroup1.Load(cgroup1.StaticPath(rel), cgroup1.WithHierarchy(hierarchyV1(root, names)))
	if errors.Is(err, cgroup1.ErrCgroupDeleted) {
		return nil, nil
	}
	return cg, err
}

func (g *v1) version() string { return "v1" }

// dirs lists each distinct group directory, in controllersV1 order.
func (g *v1) dirs() []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range controllersV1 {
		if d, ok := g.ctrl[c]; ok && !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

func (g *v1) add(pid int) error {
	if g.cg == nil {
		return fmt.Errorf("%w: %s", cgroup1.ErrCgroupDeleted, g.rel)
	}
	return g.cg.AddProc(uint64(pid))
}

func (g *v1) fd() (*os.File, error) { return nil, ErrNoFD }

// procs is the union of the group's processes in every hierarchy, read
// straight from each distinct directory's cgroup.procs (the library's
// Processes walks the directory tree for each controller).
func (g *v1) procs() ([]int, error) {
	if g.cg == nil {
		return nil, nil
	}
	seen := map[int]bool{}
	for _, d := range g.dirs() {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, f := range strings.Fields(string(b)) {
			p, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is not a pid", filepath.Join(d, "cgroup.procs"), f)
			}
			seen[p] = true
		}
	}
	out := make([]int, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Ints(out)
	return out, nil
}

func (g *v1) usage() (Usage, int64, error) {
	var u Usage
	if g.stat == nil {
		return u, 0, fmt.Errorf("%w: %s", cgroup1.ErrCgroupDeleted, g.rel)
	}
	m, err := g.stat.Stat()
	if err != nil {
		return u, 0, err
	}
	if m.Memory == nil || m.MemoryOomControl == nil || m.CPU == nil || m.Pids == nil {
		return u, 0, fmt.Errorf("incomplete statistics of %s: memory, cpu, cpuacct and pids are needed", g.rel)
	}
	u.PeakMemoryBytes = int64(m.Memory.Usage.Max)  // memory.max_usage_in_bytes
	u.MemoryBytes = int64(m.Memory.Usage.Usage)    // memory.usage_in_bytes
	u.OOMKills = int64(m.MemoryOomControl.OomKill) // oom_control's oom_kill, Linux 4.13+
	u.CPUTime = time.Duration(m.CPU.Usage.Total)   // cpuacct.usage, ns
	u.ThrottledTime = time.Duration(m.CPU.Throttling.ThrottledTime)
	// pids.peak (Linux 6.1+) is not in the library's PidsStat: read it
	// directly. Without it Group.Usage tracks the highest pids.current.
	if peak, err := readInt(filepath.Join(g.ctrl["pids"], "pids.peak")); err == nil {
		u.PidsPeak = peak
	} else if !errors.Is(err, fs.ErrNotExist) {
		return u, 0, err
	}
	return u, int64(m.Pids.Current), nil
}

// kill freezes the group, signals every process and thaws it, so nothing
// forks between listing and signalling. cgroup1 has no kill of its own.
func (g *v1) kill() error {
	if g.cg == nil {
		return nil
	}
	frozen := false
	for _, s := range g.cg.Subsystems() {
		frozen = frozen || s.Name() == cgroup1.Freezer
	}
	if !frozen {
		pids, err := g.procs()
		if err != nil {
			return err
		}
		return killPids(pids)
	}
	// The library's Freeze and Thaw wait until freezer.state reports
	// the state.
	if err := g.cg.Freeze(); err != nil {
		return errors.Join(fmt.Errorf("freeze: %w", err), g.thaw())
	}
	pids, err := g.procs()
	if err == nil {
		err = killPids(pids)
	}
	return errors.Join(err, g.thaw())
}

func (g *v1) thaw() error {
	if err := g.cg.Thaw(); err != nil {
		return fmt.Errorf("thaw: %w", err)
	}
	return nil
}

// remove deletes the group's directory in every hierarchy (the library
// retries while the kernel reports it busy).
func (g *v1) remove() error {
	if g.cg == nil {
		return nil
	}
	err := g.cg.Delete()
	if errors.Is(err, cgroup1.ErrCgroupDeleted) {
		return nil
	}
	return err
}
