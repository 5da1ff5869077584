package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentsandbox/agentsandbox/vmrunner"
	"golang.org/x/sys/unix"
)

// v2 is a group in the unified hierarchy mounted at mount.
type v2 struct {
	mount string
	rel   string
}

// controllersV2 are the controllers a group enables in its ancestors.
// Memory, pids and cpu are always on, so that Usage can read their figures
// even without a limit; io only when throttling.
func controllersV2(l Limits) []string {
	c := []string{"memory", "pids", "cpu"}
	if l.IOReadBps > 0 || l.IOWriteBps > 0 {
		c = append(c, "io")
	}
	return c
}

// valuesV2 are the files and values that hold a v2 group to l, in the
// order they are written. memory.swap.max is added by newV2 when the kernel
// accounts swap.
func valuesV2(l Limits) []value {
	var v []value
	if l.MemoryBytes > 0 {
		v = append(v, value{"memory.max", fmt.Sprint(l.MemoryBytes)})
	}
	if l.PIDs > 0 {
		v = append(v, value{"pids.max", fmt.Sprint(l.PIDs)})
	}
	if l.VCPU > 0 {
		period := CPUPeriod.Microseconds()
		v = append(v, value{"cpu.max", fmt.Sprintf("%d %d", int64(l.VCPU)*period, period)})
	}
	if l.IOReadBps > 0 || l.IOWriteBps > 0 {
		for _, d := range l.IODevices {
			line := d.String()
			if l.IOReadBps > 0 {
				line += fmt.Sprintf(" rbps=%d", l.IOReadBps)
			}
			if l.IOWriteBps > 0 {
				line += fmt.Sprintf(" wbps=%d", l.IOWriteBps)
			}
			v = append(v, value{"io.max", line})
		}
	}
	return v
}

// value is one write of a control file.
type value struct{ file, data string }

func newV2(mount, rel string, l Limits) (*v2, error) {
	g := &v2{mount: mount, rel: rel}
	ctrls := controllersV2(l)
	if !hasControllers(mount, ctrls...) {
		return nil, fmt.Errorf("the cgroup2 hierarchy at %s does not offer all of %v (see %s/cgroup.controllers)", mount, ctrls, mount)
	}
	// Enable the controllers for the children of every ancestor, creating
	// the ancestors below the mount as needed (the root is exempt from the
	// no-internal-processes rule; our own ancestors hold no processes).
	enable := "+" + strings.Join(ctrls, " +")
	dir := mount
	for _, part := range strings.Split(strings.TrimPrefix(rel, "/"), "/") {
		if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), enable); err != nil {
			return nil, fmt.Errorf("enable %s in %s: %w", enable, dir, err)
		}
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, err
		}
	}
	vals := valuesV2(l)
	if l.MemoryBytes > 0 && exists(filepath.Join(dir, "memory.swap.max")) {
		vals = append(vals, value{"memory.swap.max", "0"})
	}
	for _, v := range vals {
		if err := writeFile(filepath.Join(dir, v.file), v.data); err != nil {
			return nil, fmt.Errorf("set %s to %q: %w", v.file, v.data, err)
		}
	}
	return g, nil
}

func (g *v2) version() string { return "v2" }
func (g *v2) dir() string     { return filepath.Join(g.mount, g.rel) }
func (g *v2) dirs() []string  { return []string{g.dir()} }

func (g *v2) add(pid int) error {
	return writeFile(filepath.Join(g.dir(), "cgroup.procs"), fmt.Sprint(pid))
}

func (g *v2) fd() (*os.File, error) {
	fd, err := unix.Open(g.dir(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), g.dir()), nil
}

func (g *v2) procs() ([]int, error) { return unionProcs(g.dirs()) }

func (g *v2) usage() (vmrunner.Usage, int64, error) {
	var u vmrunner.Usage
	d := g.dir()
	var err error
	// memory.peak is Linux 5.19+; before it only the current figure exists.
	if u.PeakMemoryBytes, err = readIntFirst(d, "memory.peak", "memory.current"); err != nil {
		return u, 0, err
	}
	cpu, err := readKV(filepath.Join(d, "cpu.stat"))
	if err != nil {
		return u, 0, err
	}
	u.CPUTime = time.Duration(cpu["usage_usec"]) * time.Microsecond
	u.ThrottledTime = time.Duration(cpu["throttled_usec"]) * time.Microsecond
	ev, err := readKV(filepath.Join(d, "memory.events"))
	if err != nil {
		return u, 0, err
	}
	u.OOMKills = ev["oom_kill"]
	cur, err := readInt(filepath.Join(d, "pids.current"))
	if err != nil {
		return u, 0, err
	}
	// pids.peak is a recent addition; without it Group.Usage tracks the
	// highest pids.current it saw.
	if peak, err := readInt(filepath.Join(d, "pids.peak")); err == nil {
		u.PidsPeak = peak
	} else if !errors.Is(err, os.ErrNotExist) {
		return u, 0, err
	}
	return u, cur, nil
}

// kill writes cgroup.kill (Linux 5.14+), or else freezes, signals and thaws.
func (g *v2) kill() error {
	d := g.dir()
	if !exists(d) {
		return nil
	}
	if p := filepath.Join(d, "cgroup.kill"); exists(p) {
		return writeFile(p, "1")
	}
	if err := g.freeze("1"); err != nil {
		return errors.Join(err, g.freeze("0"))
	}
	pids, err := g.procs()
	if err == nil {
		err = killPids(pids)
	}
	return errors.Join(err, g.freeze("0"))
}

// freeze sets cgroup.freeze and waits until cgroup.events reports it.
func (g *v2) freeze(state string) error {
	d := g.dir()
	if err := writeFile(filepath.Join(d, "cgroup.freeze"), state); err != nil {
		return fmt.Errorf("set cgroup.freeze to %s: %w", state, err)
	}
	return waitFor("freeze "+d, func() (bool, error) {
		ev, err := os.ReadFile(filepath.Join(d, "cgroup.events"))
		if err != nil {
			return false, err
		}
		for _, line := range strings.Split(string(ev), "\n") {
			if line == "frozen "+state {
				return true, nil
			}
		}
		return false, nil
	})
}
