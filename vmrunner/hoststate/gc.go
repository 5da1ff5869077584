package hoststate

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/vmrunner/wsquota"
)

// WorkspaceImage is the name of a step's workspace quota image, beside its
// workspace directory: RUNDIR/steps/STEP/workspace.img serves
// RUNDIR/steps/STEP/workspace.
const WorkspaceImage = "workspace.img"

// QuotaTemplates is the directory, in the state directory beside the run
// directories (runs/), that keeps the workspace quota's template images
// (wsquota.Templates) from one run to the next.
const QuotaTemplates = "quota-templates"

// TemplatesDir is the template directory that goes with the run
// directories under runRoot: STATEDIR/quota-templates for STATEDIR/runs.
func TemplatesDir(runRoot string) string {
	return filepath.Join(filepath.Dir(filepath.Clean(runRoot)), QuotaTemplates)
}

// GC removes what applies that are no longer running (killed with SIGKILL,
// crashed) left on the host, for both backends, and reports each thing it
// removed (or found already gone) as "cgroup PATH", "netns NAME", "mount
// PATH", "loop DEVICE", "dir PATH" or "state FILE", in the order it went.
//
// First the state files in stateDir (DefaultDir when empty): of every dead
// owner the cgroups (killing what is left in them) and network namespaces,
// before any mount goes, since a jail's mount namespace holds its
// workspace's filesystem; then for each its mounts, its loop devices (only
// once its mounts are undone, and only while they serve the recorded
// image), its directories (rmdir, never recursively) and, once all of its
// entries are gone, its state file. The owner is alive when its pid runs
// with the recorded start time; states of live owners are left alone.
//
// Then, when runRoot is not empty, the run directories under it (the
// engine's workspaces, control directories and fetched inputs) whose owner
// (OwnerFile) is gone: it unmounts their workspace quotas (a loop device's
// filesystem at steps/STEP/workspace whose image is
// steps/STEP/workspace.img) and detaches any loop device still serving a
// file of the run, whether or not a state file lists them. A directory with
// anything else mounted below it is left alone and reported, never removed
// through the mount. Last, the template directory beside runRoot
// (TemplatesDir) loses what no apply will use, each reported as "template
// PATH": temporary files of processes that are gone, templates that are
// not whole, and templates of another mkfs.ext4 than the host's (see
// wsquota.GCTemplates). Templates in use stay: they are a cache that
// spares each apply a mkfs.
func GC(stateDir, runRoot string) (removed []string, err error) {
	return gc(realHost{}, stateDir, runRoot)
}

func gc(h host, stateDir, runRoot string) ([]string, error) {
	if stateDir == "" {
		stateDir = DefaultDir
	}
	removed, err := gcStates(h, stateDir)
	if runRoot == "" {
		return removed, err
	}
	runs, rerr := gcRuns(h, runRoot)
	removed = append(removed, runs...)
	mkfs, _ := wsquota.FindMkfs() // none: every template goes
	tmpl, terr := wsquota.GCTemplates(TemplatesDir(runRoot), mkfs)
	return append(removed, tmpl...), errors.Join(err, rerr, terr)
}

// host is what GC does to the host and reads from it. GC uses realHost;
// tests pass a fake that records what it was asked.
type host interface {
	deleteCgroup(path string) error
	deleteNetns(name string) error
	unmount(dir string) error
	detach(device, image string) error
	// mounts lists the mount table, loops the attached loop devices with
	// the files they serve.
	mounts() ([]mount, error)
	loops() ([]Loop, error)
}

type realHost struct{}

func (realHost) deleteCgroup(p string) error       { return cgroup.DeleteByPath(p) }
func (realHost) deleteNetns(n string) error        { return netns.DeleteByName(n) }
func (realHost) unmount(dir string) error          { return wsquota.UnmountDir(dir) }
func (realHost) detach(device, image string) error { return wsquota.Detach(device, image) }
func (realHost) mounts() ([]mount, error)          { return readMountInfo() }
func (realHost) loops() ([]Loop, error)            { return attachedLoops() }

// gcStates removes what the state files in dir list; see GC.
func gcStates(h host, dir string) (removed []string, err error) {
	states, err := Read(dir)
	if err != nil {
		return nil, fmt.Errorf("gc: %w", err)
	}
	var errs []error
	var dead []File
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
		for _, c := range sf.State.Cgroups {
			note(i, "cgroup "+c, h.deleteCgroup(c))
		}
		for _, n := range sf.State.Netns {
			note(i, "netns "+n, h.deleteNetns(n))
		}
	}
	for i, sf := range dead {
		s := sf.State
		unmounted := true
		for _, m := range s.Mounts {
			e := h.unmount(m)
			unmounted = unmounted && e == nil
			note(i, "mount "+m, e)
		}
		if unmounted {
			for _, l := range s.Loops {
				note(i, "loop "+l.Device, h.detach(l.Device, l.Image))
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

// gcRuns removes the run directories under runRoot whose owner is gone;
// see GC.
func gcRuns(h host, runRoot string) (removed []string, err error) {
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
	mounts, err := h.mounts()
	if err != nil {
		return nil, fmt.Errorf("gc runs: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(runRoot, e.Name())
		var owner State
		b, err := os.ReadFile(filepath.Join(dir, OwnerFile))
		// An empty owner file is what a crash leaves of one that was
		// never synced (WriteOwner): its owner is gone.
		if err == nil && len(b) > 0 {
			if err := json.Unmarshal(b, &owner); err != nil {
				errs = append(errs, fmt.Errorf("gc run %s: read owner: %w", dir, err))
				continue
			}
		}
		if owner.OwnerAlive() {
			continue
		}
		undone, err := undoQuotas(h, mounts, dir)
		removed = append(removed, undone...)
		if err != nil {
			errs = append(errs, fmt.Errorf("gc run %s: %w", dir, err))
			continue
		}
		if len(undone) > 0 {
			if mounts, err = h.mounts(); err != nil {
				return removed, fmt.Errorf("gc runs: %w", err)
			}
		}
		if m := mountedBelow(mounts, dir); m != "" {
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
func undoQuotas(h host, mounts []mount, dir string) (undone []string, err error) {
	loops, err := h.loops()
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, m := range mounts {
		if !isQuotaMount(m, loops, dir) {
			continue
		}
		if err := h.unmount(m.Point); err != nil {
			errs = append(errs, err)
			continue
		}
		undone = append(undone, "mount "+m.Point)
	}
	if loops, err = h.loops(); err != nil {
		return undone, errors.Join(append(errs, err)...)
	}
	for _, l := range loops {
		if !strings.HasPrefix(l.Image, dir+"/") {
			continue
		}
		if err := h.detach(l.Device, l.Image); err != nil {
			errs = append(errs, err)
			continue
		}
		undone = append(undone, "loop "+l.Device)
	}
	return undone, errors.Join(errs...)
}

// isQuotaMount reports whether m is a workspace quota of the run in dir: a
// filesystem on a loop device mounted at steps/STEP/workspace whose image
// is steps/STEP/workspace.img.
func isQuotaMount(m mount, loops []Loop, dir string) bool {
	rel, err := filepath.Rel(filepath.Join(dir, "steps"), m.Point)
	if err != nil {
		return false
	}
	parts := strings.Split(rel, "/")
	if len(parts) != 2 || parts[0] == ".." || parts[1] != "workspace" || !strings.HasPrefix(m.Source, "/dev/loop") {
		return false
	}
	for _, l := range loops {
		if l.Device == m.Source {
			return l.Image == filepath.Join(filepath.Dir(m.Point), WorkspaceImage)
		}
	}
	return false
}

// attachedLoops lists the loop devices that serve a file, with that file.
func attachedLoops() ([]Loop, error) {
	sys, err := filepath.Glob("/sys/block/loop*")
	if err != nil {
		return nil, err
	}
	var out []Loop
	for _, l := range sys {
		dev := "/dev/" + filepath.Base(l)
		back, err := wsquota.BackingFile(dev)
		if err != nil || back == "" {
			continue
		}
		out = append(out, Loop{Device: dev, Image: back})
	}
	return out, nil
}

// mount is one line of /proc/self/mountinfo.
type mount struct {
	Point  string // where it is mounted
	Source string // what is mounted: a device such as /dev/loop3
}

func readMountInfo() ([]mount, error) {
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

// mountedBelow returns a mount point at or below dir, or "".
func mountedBelow(mounts []mount, dir string) string {
	for _, m := range mounts {
		if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
			return m.Point
		}
	}
	return ""
}
