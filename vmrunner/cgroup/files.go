package cgroup

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// The few direct file operations the library has no API for.

// readInt reads a file holding one integer ("max" reads as -1): pids.peak,
// which neither cgroup1's nor cgroup2's PidsStat carries.
func readInt(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", p, err)
	}
	return v, nil
}

// exists reports whether p exists.
func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// killPids sends SIGKILL to each pid; a pid that is already gone is fine.
// cgroup1 has no kill: the v1 backend signals the pids of the frozen group.
func killPids(pids []int) error {
	var errs []error
	for _, p := range pids {
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill pid %d: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
