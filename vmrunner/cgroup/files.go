package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// readInt reads a file holding one integer ("max" reads as -1).
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

// readKV reads a flat keyed file such as cpu.stat or memory.events
// ("key value" per line).
func readKV(p string) (map[string]int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parse %s: line %q: %w", p, sc.Text(), err)
		}
		out[k] = n
	}
	return out, nil
}

// readIntFirst reads the first of files that exists.
func readIntFirst(dir string, files ...string) (int64, error) {
	for _, f := range files {
		v, err := readInt(filepath.Join(dir, f))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		return v, err
	}
	return 0, fmt.Errorf("none of %s in %s: %w", strings.Join(files, ", "), dir, fs.ErrNotExist)
}

// readProcs reads the pids in dir/cgroup.procs (missing dir: none).
func readProcs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		p, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("parse %s/cgroup.procs: %w", dir, err)
		}
		pids = append(pids, p)
	}
	return pids, nil
}

// unionProcs reads cgroup.procs in every dir and returns the sorted union.
func unionProcs(dirs []string) ([]int, error) {
	seen := map[int]bool{}
	for _, d := range dirs {
		pids, err := readProcs(d)
		if err != nil {
			return nil, err
		}
		for _, p := range pids {
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

func writeFile(p, v string) error {
	if err := os.WriteFile(p, []byte(v), 0); err != nil {
		return err
	}
	return nil
}

// exists reports whether p exists.
func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// freezeTimeout bounds the wait for a freezer to report the frozen state.
var freezeTimeout = 2 * time.Second

// waitFor polls cond until it is true or freezeTimeout passes.
func waitFor(what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(freezeTimeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not done after %s", what, freezeTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// killPids sends SIGKILL to each pid; a pid that is already gone is fine.
func killPids(pids []int) error {
	var errs []error
	for _, p := range pids {
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill pid %d: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
