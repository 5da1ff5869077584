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

// cmdlineFile is the kernel command line; tests point it at a fake.
var cmdlineFile = "/proc/cmdline"

// socketAccounting fails when the kernel was booted with
// cgroup.memory=nosocket, which stops charging socket buffers to memory
// groups in both cgroup versions: then a step's TCP buffers escape its
// memory limit. The library has no API for this.
func socketAccounting() error {
	b, err := os.ReadFile(cmdlineFile)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("read the kernel command line: %w", err)
	}
	for _, arg := range strings.Fields(string(b)) {
		v, ok := strings.CutPrefix(arg, "cgroup.memory=")
		if !ok {
			continue
		}
		for _, o := range strings.Split(v, ",") {
			if o == "nosocket" {
				return fmt.Errorf("the kernel was booted with %s: socket buffers are not charged to memory cgroups, so a step's TCP buffers would escape its memory limit; boot without nosocket", arg)
			}
		}
	}
	return nil
}
