package engine

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentsandbox/agentsandbox/internal/atomicfile"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/wsquota"
)

// ownerFile in a run directory names the process that owns it, so GCRuns
// can tell a live run from the leftovers of one killed with SIGKILL.
const ownerFile = "owner.json"

func writeOwner(runDir, runID string) error {
	b, err := json.Marshal(vmrunner.NewState(runID, "run"))
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(runDir, ownerFile), b, 0o600)
}

// GCRuns removes the run directories (workspaces, control directories,
// fetched inputs) under runRoot whose owning apply is gone. It first
// unmounts the run's workspace quotas (a loop device's filesystem mounted
// at steps/STEP/workspace whose image is steps/STEP/workspace.img) and
// detaches any loop device still serving a file of the run, whether or not
// a state file lists them. A directory with anything else mounted below it
// is left alone and reported, never removed through the mount.
func GCRuns(runRoot string) (removed []string, err error) {
	// mountinfo shows absolute paths without symlinks.
	if abs, err := filepath.Abs(runRoot); err == nil {
		runRoot = abs
	}
	if real, err := filepath.EvalSymlinks(runRoot); err == nil {
		runRoot = real
	}
	entries, err := os.ReadDir(runRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("gc runs: %w", err)
	}
	mounts, err := mountPoints()
	if err != nil {
		return nil, fmt.Errorf("gc runs: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(runRoot, e.Name())
		var owner vmrunner.State
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err == nil {
			if err := json.Unmarshal(b, &owner); err != nil {
				errs = append(errs, fmt.Errorf("gc run %s: read owner: %w", dir, err))
				continue
			}
		}
		if owner.OwnerAlive() {
			continue
		}
		undone, err := undoQuotas(mounts, dir)
		removed = append(removed, undone...)
		if err != nil {
			errs = append(errs, fmt.Errorf("gc run %s: %w", dir, err))
			continue
		}
		if len(undone) > 0 {
			if mounts, err = mountPoints(); err != nil {
				return removed, fmt.Errorf("gc runs: %w", err)
			}
		}
		if m := mountedBelow(pointsOf(mounts), dir); m != "" {
			errs = append(errs, fmt.Errorf("gc run %s: %s is still mounted; unmount it first", dir, m))
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("gc run %s: %w", dir, err))
			continue
		}
		removed = append(removed, "dir "+dir)
	}
	return removed, errors.Join(errs...)
}

// undoQuotas unmounts the workspace quotas of the dead run in dir and
// detaches the loop devices that serve its files.
func undoQuotas(mounts []mount, dir string) (undone []string, err error) {
	var errs []error
	for _, m := range mounts {
		if !isQuotaMount(m, dir) {
			continue
		}
		if err := wsquota.UnmountDir(m.Point); err != nil {
			errs = append(errs, err)
			continue
		}
		undone = append(undone, "mount "+m.Point)
	}
	loops, err := filepath.Glob("/sys/block/loop*")
	if err != nil {
		return undone, err
	}
	for _, l := range loops {
		dev := "/dev/" + filepath.Base(l)
		back, err := wsquota.BackingFile(dev)
		if err != nil || !strings.HasPrefix(back, dir+"/") {
			continue
		}
		if err := wsquota.Detach(dev, back); err != nil {
			errs = append(errs, err)
			continue
		}
		undone = append(undone, "loop "+dev)
	}
	return undone, errors.Join(errs...)
}

// isQuotaMount reports whether m is a workspace quota of the run in dir:
// a filesystem on a loop device mounted at steps/STEP/workspace whose
// image is steps/STEP/workspace.img.
func isQuotaMount(m mount, dir string) bool {
	rel, err := filepath.Rel(filepath.Join(dir, "steps"), m.Point)
	if err != nil {
		return false
	}
	parts := strings.Split(rel, "/")
	if len(parts) != 2 || parts[0] == ".." || parts[1] != "workspace" || !strings.HasPrefix(m.Source, "/dev/loop") {
		return false
	}
	back, err := wsquota.BackingFile(m.Source)
	return err == nil && back == filepath.Join(filepath.Dir(m.Point), ImageFile)
}

// mount is one line of /proc/self/mountinfo.
type mount struct {
	Point  string // where it is mounted
	Source string // what is mounted: a device such as /dev/loop3
}

func mountPoints() ([]mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, parseMountInfo(sc.Text()))
	}
	return out, sc.Err()
}

// parseMountInfo reads a mountinfo line: "ID PARENT MAJ:MIN ROOT POINT
// OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER-OPTIONS".
func parseMountInfo(line string) mount {
	fields := strings.Fields(line)
	var m mount
	if len(fields) > 4 {
		m.Point = unescapeMount(fields[4])
	}
	for i := 5; i+2 < len(fields); i++ {
		if fields[i] == "-" {
			m.Source = unescapeMount(fields[i+2])
			break
		}
	}
	return m
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

func mountedBelow(points []string, dir string) string {
	for _, p := range points {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			return p
		}
	}
	return ""
}

func pointsOf(mounts []mount) []string {
	out := make([]string, len(mounts))
	for i, m := range mounts {
		out[i] = m.Point
	}
	return out
}
