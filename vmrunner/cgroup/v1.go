package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentsandbox/agentsandbox/vmrunner"
)

// controllersV1 are the v1 hierarchies a group lives in, each mounted at
// ROOT/NAME. blkio is only needed for IO limits.
var controllersV1 = []string{"memory", "pids", "cpu", "cpuacct", "freezer", "blkio"}

// v1 is a group in the per-controller hierarchies below root.
type v1 struct {
	root string
	rel  string
	// ctrl maps each controller to its group directory. Co-mounted
	// controllers (cpu,cpuacct) share one directory.
	ctrl map[string]string
}

// openV1 finds the controllers mounted below root; the group's directories
// need not exist.
func openV1(root, rel string) (*v1, error) {
	g := &v1{root: root, rel: rel, ctrl: map[string]string{}}
	for _, c := range controllersV1 {
		mount := filepath.Join(root, c)
		if !exists(filepath.Join(mount, "cgroup.procs")) {
			continue
		}
		if real, err := filepath.EvalSymlinks(mount); err == nil {
			mount = real
		}
		g.ctrl[c] = filepath.Join(mount, rel)
	}
	return g, nil
}

// valuesV1 are the writes that hold a v1 group to l, per controller, in
// order. swap says whether the kernel accounts swap (memory.memsw.*).
func valuesV1(l Limits, swap bool) map[string][]value {
	v := map[string][]value{}
	if l.MemoryBytes > 0 {
		m := fmt.Sprint(l.MemoryBytes)
		v["memory"] = append(v["memory"], value{"memory.limit_in_bytes", m})
		if swap {
			// memory+swap equal to memory: no swap on top.
			v["memory"] = append(v["memory"], value{"memory.memsw.limit_in_bytes", m})
		}
	}
	if l.PIDs > 0 {
		v["pids"] = append(v["pids"], value{"pids.max", fmt.Sprint(l.PIDs)})
	}
	if l.VCPU > 0 {
		period := CPUPeriod.Microseconds()
		v["cpu"] = append(v["cpu"],
			value{"cpu.cfs_period_us", fmt.Sprint(period)},
			value{"cpu.cfs_quota_us", fmt.Sprint(int64(l.VCPU) * period)})
	}
	for _, d := range l.IODevices {
		if l.IOReadBps > 0 {
			v["blkio"] = append(v["blkio"], value{"blkio.throttle.read_bps_device", fmt.Sprintf("%s %d", d, l.IOReadBps)})
		}
		if l.IOWriteBps > 0 {
			v["blkio"] = append(v["blkio"], value{"blkio.throttle.write_bps_device", fmt.Sprintf("%s %d", d, l.IOWriteBps)})
		}
	}
	return v
}

func newV1(root, rel string, l Limits) (*v1, error) {
	g, err := openV1(root, rel)
	if err != nil {
		return nil, err
	}
	need := []string{"memory", "pids", "cpu", "cpuacct", "freezer"}
	if l.IOReadBps > 0 || l.IOWriteBps > 0 {
		need = append(need, "blkio")
	} else {
		delete(g.ctrl, "blkio")
	}
	for _, c := range need {
		if _, ok := g.ctrl[c]; !ok {
			return nil, fmt.Errorf("cgroup v1 controller %s is not mounted at %s", c, filepath.Join(root, c))
		}
	}
	for _, c := range need {
		if err := os.MkdirAll(g.ctrl[c], 0o755); err != nil {
			return nil, err
		}
	}
	swap := exists(filepath.Join(root, "memory", "memory.memsw.limit_in_bytes"))
	vals := valuesV1(l, swap)
	for _, c := range need {
		for _, v := range vals[c] {
			if err := writeFile(filepath.Join(g.ctrl[c], v.file), v.data); err != nil {
				return nil, fmt.Errorf("set %s to %q: %w", v.file, v.data, err)
			}
		}
	}
	return g, nil
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
	for _, d := range g.dirs() {
		if err := writeFile(filepath.Join(d, "cgroup.procs"), fmt.Sprint(pid)); err != nil {
			return err
		}
	}
	return nil
}

func (g *v1) fd() (*os.File, error) { return nil, ErrNoFD }

func (g *v1) procs() ([]int, error) { return unionProcs(g.dirs()) }

func (g *v1) usage() (vmrunner.Usage, int64, error) {
	var u vmrunner.Usage
	var err error
	mem, pids := g.ctrl["memory"], g.ctrl["pids"]
	if u.PeakMemoryBytes, err = readInt(filepath.Join(mem, "memory.max_usage_in_bytes")); err != nil {
		return u, 0, err
	}
	oom, err := readKV(filepath.Join(mem, "memory.oom_control"))
	if err != nil {
		return u, 0, err
	}
	u.OOMKills = oom["oom_kill"] // Linux 4.13+
	ns, err := readInt(filepath.Join(g.ctrl["cpuacct"], "cpuacct.usage"))
	if err != nil {
		return u, 0, err
	}
	u.CPUTime = time.Duration(ns)
	cpu, err := readKV(filepath.Join(g.ctrl["cpu"], "cpu.stat"))
	if err != nil {
		return u, 0, err
	}
	u.ThrottledTime = time.Duration(cpu["throttled_time"])
	cur, err := readInt(filepath.Join(pids, "pids.current"))
	if err != nil {
		return u, 0, err
	}
	if peak, err := readInt(filepath.Join(pids, "pids.peak")); err == nil {
		u.PidsPeak = peak
	} else if !errors.Is(err, os.ErrNotExist) {
		return u, 0, err
	}
	return u, cur, nil
}

// kill freezes the group, signals every process and thaws it, so nothing
// forks between listing and signalling.
func (g *v1) kill() error {
	fz, ok := g.ctrl["freezer"]
	if !ok || !exists(fz) {
		pids, err := g.procs()
		if err != nil {
			return err
		}
		return killPids(pids)
	}
	if err := g.freeze("FROZEN"); err != nil {
		return errors.Join(err, g.freeze("THAWED"))
	}
	pids, err := g.procs()
	if err == nil {
		err = killPids(pids)
	}
	return errors.Join(err, g.freeze("THAWED"))
}

func (g *v1) freeze(state string) error {
	d := g.ctrl["freezer"]
	if err := writeFile(filepath.Join(d, "freezer.state"), state); err != nil {
		return fmt.Errorf("set freezer.state to %s: %w", state, err)
	}
	return waitFor("set freezer.state of "+d+" to "+state, func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(d, "freezer.state"))
		if err != nil {
			return false, err
		}
		return strings.TrimSpace(string(b)) == state, nil
	})
}
