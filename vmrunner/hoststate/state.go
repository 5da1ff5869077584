package hoststate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/agentsandbox/agentsandbox/fsx/atomicfile"
)

// DefaultDir holds one state file per running step. It is under /run
// because everything a step creates (its netns, cgroup and jail directories)
// is gone after a reboot too.
const DefaultDir = "/run/agentsandbox/state"

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

// New starts the state of one step owned by the calling process.
func New(runID, step string) State {
	start, _ := processStart(os.Getpid())
	return State{RunID: runID, Step: step, PID: os.Getpid(), PIDStart: start}
}

// FileName is the state file's name in the state directory
// (StateFileName).
func (s State) FileName() string { return StateFileName(s.RunID, s.Step) }

// Write writes s atomically (temp file, fsync, rename) into dir.
func Write(dir string, s State) error {
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

// Remove removes s's file; a missing file is not an error.
func Remove(dir string, s State) error {
	if err := os.Remove(filepath.Join(dir, s.FileName())); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove state: %w", err)
	}
	return nil
}

// File is one state file as read from the state directory.
type File struct {
	Path  string
	State State
}

// Read reads every state file in dir, sorted by name. A missing dir
// holds none.
func Read(dir string) ([]File, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read states: %w", err)
	}
	var out []File
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), statePrefix) || !strings.HasSuffix(e.Name(), stateSuffix) {
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
		out = append(out, File{Path: p, State: s})
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

// OwnerFile in a run directory names the process that owns it (a State of
// step "run"), so GC can tell a live run from the leftovers of one killed
// with SIGKILL.
const OwnerFile = "owner.json"

// WriteOwner records the calling process as the owner of the run runID
// whose directory is runDir. The file is renamed into place whole but not
// synced: it only matters while its owner runs, and after a crash every
// owner is gone; what a crash can leave is an empty file, which GC takes
// for a dead owner. (The fsync of the file and of the run directory cost
// an apply milliseconds on a busy disk.)
func WriteOwner(runDir, runID string) error {
	b, err := json.Marshal(New(runID, "run"))
	if err != nil {
		return fmt.Errorf("write owner of run %s: %w", runID, err)
	}
	if err := atomicfile.Write(filepath.Join(runDir, OwnerFile), b, 0o600, atomicfile.Options{NoSync: true}); err != nil {
		return fmt.Errorf("write owner of run %s: %w", runID, err)
	}
	return nil
}
