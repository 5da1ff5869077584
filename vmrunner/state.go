package vmrunner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentsandbox/agentsandbox/internal/atomicfile"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/agentsandbox/agentsandbox/vmrunner/wsquota"
)

// DefaultStateDir holds one state file per running step. It is under /run
// because everything a step creates (its netns, cgroup and jail directories)
// is gone after a reboot too.
const DefaultStateDir = "/run/agentsandbox/state"

// State lists what one step of a run created on the host, so that `agentsandbox
// gc` can remove it when the apply that made it was killed (SIGKILL, a crash)
// before it could clean up. A backend writes the state before it creates
// each thing and removes the file once everything is removed again.
type State struct {
	RunID string `json:"runId"`
	Step  string `json:"step"`
	// PID is the agentsandbox process that owns these resources, and
	// PIDStart its start time (clock ticks after boot, /proc/PID/stat field
	// 22), so a reused pid is not taken for the owner.
	PID      int      `json:"pid"`
	PIDStart uint64   `json:"pidStart"`
	Netns    []string `json:"netns,omitempty"`   // names under /run/netns
	Cgroups  []string `json:"cgroups,omitempty"` // paths such as /agentsandbox/RUN/STEP
	// Dirs are directories the step created that are empty when unused,
	// such as a jail's root mount point. GC removes them with rmdir, never
	// recursively, so a mount that somehow leaked cannot take host files
	// with it.
	Dirs []string `json:"dirs,omitempty"`
	// Mounts are mount points the step mounted a filesystem on, such as
	// its workspace quota (vmrunner/wsquota). GC unmounts them (lazily when
	// busy) before it removes anything, so no directory is ever removed
	// through one.
	Mounts []string `json:"mounts,omitempty"`
	// Loops are loop devices the step attached, with the image each
	// serves. GC detaches a device only while it still serves that image:
	// a device number reused since is someone else's.
	Loops []Loop `json:"loops,omitempty"`
}

// Loop is one loop device and the image file attached to it.
type Loop struct {
	Device string `json:"device"` // /dev/loopN
	Image  string `json:"image"`  // absolute path of the backing file
}

// NewState starts the state of one step owned by the calling process.
func NewState(runID, step string) State {
	start, _ := processStart(os.Getpid())
	return State{RunID: runID, Step: step, PID: os.Getpid(), PIDStart: start}
}

// FileName is the state file's name in the state directory.
func (s State) FileName() string {
	return "state-" + safeName(s.RunID) + "-" + safeName(s.Step) + ".json"
}

func safeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			fmt.Fprintf(&b, "%%%02x", r)
		}
	}
	return b.String()
}

// WriteState writes s atomically (temp file, fsync, rename) into dir.
func WriteState(dir string, s State) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, s.FileName()), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

// RemoveState removes s's file; a missing file is not an error.
func RemoveState(dir string, s State) error {
	if err := os.Remove(filepath.Join(dir, s.FileName())); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove state: %w", err)
	}
	return nil
}

// StateFile is one state file as read from the state directory.
type StateFile struct {
	Path  string
	State State
}

// ReadStates reads every state file in dir, sorted by name. A missing dir
// holds none.
func ReadStates(dir string) ([]StateFile, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read states: %w", err)
	}
	var out []StateFile
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "state-") || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read state: %w", err)
		}
		var s State
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return nil, fmt.Errorf("read state %s: %w (remove it by hand if it is not agentsandbox's)", p, err)
		}
		out = append(out, StateFile{Path: p, State: s})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// OwnerAlive reports whether the process that wrote s still runs.
func (s State) OwnerAlive() bool {
	if s.PID <= 0 {
		return false
	}
	if err := syscall.Kill(s.PID, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	start, err := processStart(s.PID)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	return s.PIDStart == 0 || start == s.PIDStart
}

// processStart reads a process's start time from /proc/PID/stat.
func processStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: split
	// after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); the start time is field 22.
	if len(f) < 20 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// Remover removes one kind of leftover; the namespace backend's GC passes
// the netns and cgroup packages' functions (vmrunner cannot import them).
type Remover struct {
	Netns  func(name string) error
	Cgroup func(path string) error
	// Unmount and Detach undo Mounts and Loops; nil takes
	// wsquota.UnmountDir and wsquota.Detach.
	Unmount func(dir string) error
	Detach  func(device, image string) error
}

// GC removes what the state files in dir list for every owner that is no
// longer running: the cgroups of all of them first (killing what is left in
// them), and their network namespaces, then for each its mounts, loop
// devices and directories; a state file goes once all of its entries are
// gone. It returns the entries
// it removed (or found already gone) as "cgroup PATH", "netns NAME",
// "mount PATH", "loop DEVICE", "dir PATH" and "state FILE". States of
// owners that still run are left alone.
func GC(dir string, rm Remover) (removed []string, err error) {
	states, err := ReadStates(dir)
	if err != nil {
		return nil, fmt.Errorf("gc: %w", err)
	}
	if rm.Unmount == nil {
		rm.Unmount = wsquota.UnmountDir
	}
	if rm.Detach == nil {
		rm.Detach = wsquota.Detach
	}
	var errs []error
	var dead []StateFile
	for _, sf := range states {
		if !sf.State.OwnerAlive() {
			dead = append(dead, sf)
		}
	}
	failed := make([]bool, len(dead))
	note := func(i int, what string, e error) {
		if e != nil {
			errs = append(errs, fmt.Errorf("gc run %s step %s: %w", dead[i].State.RunID, dead[i].State.Step, e))
			failed[i] = true
			return
		}
		removed = append(removed, what)
	}
	// First what runs: every dead step's processes are killed before any
	// mount goes, since a jail's mount namespace holds its workspace's
	// filesystem (and the step's workspace quota has a state of its own).
	for i, sf := range dead {
		s := sf.State
		for _, c := range s.Cgroups {
			if rm.Cgroup == nil {
				note(i, "", fmt.Errorf("no cgroup remover for %s", c))
				continue
			}
			note(i, "cgroup "+c, rm.Cgroup(c))
		}
		for _, n := range s.Netns {
			if rm.Netns == nil {
				note(i, "", fmt.Errorf("no netns remover for %s", n))
				continue
			}
			note(i, "netns "+n, rm.Netns(n))
		}
	}
	for i, sf := range dead {
		s := sf.State
		unmounted := true
		for _, m := range s.Mounts {
			e := rm.Unmount(m)
			unmounted = unmounted && e == nil
			note(i, "mount "+m, e)
		}
		if unmounted {
			for _, l := range s.Loops {
				note(i, "loop "+l.Device, rm.Detach(l.Device, l.Image))
			}
		}
		for _, d := range s.Dirs {
			e := os.Remove(d)
			if errors.Is(e, fs.ErrNotExist) {
				e = nil
			}
			note(i, "dir "+d, e)
		}
		if !failed[i] {
			note(i, "state "+sf.Path, os.Remove(sf.Path))
		}
	}
	return removed, errors.Join(errs...)
}
