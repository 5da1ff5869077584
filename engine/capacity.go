package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/agentsandbox/agentsandbox/policy"
)

// ProbeCapacity measures what this host can give one sandbox whose
// workspace lives under dir (the run root): the CPUs this process may run
// on, the host's memory, and the space free to it on dir's filesystem
// (dir's nearest existing parent when it is not made yet). The default
// policy's host_ceilings judge an API caller's resources against it.
func ProbeCapacity(dir string) (policy.Capacity, error) {
	c := policy.Capacity{CPUs: runtime.NumCPU()}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return c, fmt.Errorf("probe the host's memory: %w", err)
	}
	c.MemoryBytes = int64(si.Totalram) * int64(si.Unit)
	abs, err := filepath.Abs(dir)
	if err != nil {
		return c, fmt.Errorf("probe the free disk of %s: %w", dir, err)
	}
	for {
		var st unix.Statfs_t
		err := unix.Statfs(abs, &st)
		if err == nil {
			c.DiskBytes, c.DiskPath = int64(st.Bavail)*st.Bsize, abs
			return c, nil
		}
		if !errors.Is(err, fs.ErrNotExist) || filepath.Dir(abs) == abs {
			return c, fmt.Errorf("probe the free disk of %s: %w", abs, err)
		}
		abs = filepath.Dir(abs)
	}
}

// CapacityOf is a Host.Capacity that probes dir at every admission (a
// statfs and a sysinfo: microseconds), so the free disk is that of the
// moment. A probe that fails gives no capacity, and the host ceilings
// then do not judge; logf says why.
func CapacityOf(dir string, logf func(format string, args ...any)) func() *policy.Capacity {
	return func() *policy.Capacity {
		c, err := ProbeCapacity(dir)
		if err != nil {
			logf("admission without the host's capacity (data.agentsandbox.host_ceilings): %v", err)
			return nil
		}
		return &c
	}
}
