package hoststate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// fakeHost records what GC asked of the host, as text, and keeps a mount
// table and a list of loop devices that unmount and detach change.
type fakeHost struct {
	calls    []string
	fail     map[string]bool // calls that fail, such as "netns asb-bad"
	table    []mount
	attached []Loop
}

func (f *fakeHost) do(call string) error {
	f.calls = append(f.calls, call)
	if f.fail[call] {
		return errors.New("busy")
	}
	return nil
}

func (f *fakeHost) deleteCgroup(p string) error { return f.do("cgroup " + p) }
func (f *fakeHost) deleteNetns(n string) error  { return f.do("netns " + n) }

func (f *fakeHost) unmount(dir string) error {
	if err := f.do("unmount " + dir); err != nil {
		return err
	}
	f.table = slices.DeleteFunc(f.table, func(m mount) bool { return m.Point == dir })
	return nil
}

func (f *fakeHost) detach(dev, img string) error {
	if err := f.do("detach " + dev + " " + img); err != nil {
		return err
	}
	f.attached = slices.DeleteFunc(f.attached, func(l Loop) bool { return l.Device == dev })
	return nil
}

func (f *fakeHost) mounts() ([]mount, error) { return slices.Clone(f.table), nil }
func (f *fakeHost) loops() ([]Loop, error)   { return slices.Clone(f.attached), nil }

// deadPID returns the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestGC(t *testing.T) {
	dir := t.TempDir()
	mount := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(mount, 0o700); err != nil {
		t.Fatal(err)
	}
	dead := State{RunID: "r1", Step: "a", PID: deadPID(t), Netns: []string{"asb-r1-a"}, Cgroups: []string{"/agentsandbox/r1/a"}, Dirs: []string{mount}}
	alive := New("r2", "b")
	alive.Netns = []string{"asb-r2-b"}
	// The pid is alive but started at another time: a reused pid.
	reused := State{RunID: "r3", Step: "c", PID: os.Getpid(), PIDStart: 1, Netns: []string{"asb-r3-c"}}
	failing := State{RunID: "r4", Step: "d", PID: deadPID(t), Netns: []string{"asb-bad"}}
	for _, s := range []State{dead, alive, reused, failing} {
		if err := Write(dir, s); err != nil {
			t.Fatal(err)
		}
	}
	h := &fakeHost{fail: map[string]bool{"netns asb-bad": true}}
	removed, err := gc(h, dir, "")
	if err == nil {
		t.Fatal("gc: no error for the failing netns")
	}
	want := []string{"cgroup /agentsandbox/r1/a", "netns asb-r1-a", "netns asb-r3-c", "dir " + mount,
		"state " + filepath.Join(dir, dead.FileName()), "state " + filepath.Join(dir, reused.FileName())}
	if !reflect.DeepEqual(removed, want) {
		t.Errorf("removed = %q\nwant      %q", removed, want)
	}
	if wantCalls := []string{"cgroup /agentsandbox/r1/a", "netns asb-r1-a", "netns asb-r3-c", "netns asb-bad"}; !reflect.DeepEqual(h.calls, wantCalls) {
		t.Errorf("calls = %q\nwant    %q", h.calls, wantCalls)
	}
	if _, err := os.Stat(mount); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir %s still there: %v", mount, err)
	}
	left, _ := Read(dir)
	var names []string
	for _, sf := range left {
		names = append(names, sf.State.RunID)
	}
	if !reflect.DeepEqual(names, []string{"r2", "r4"}) {
		t.Errorf("states left = %v, want the running owner's and the failed one's", names)
	}
}

// TestGCMountsBeforeDirs: a killed step's workspace quota is unmounted and
// its loop device detached before any directory goes, and a loop device is
// not detached while the mount on it could not be undone.
func TestGCMountsBeforeDirs(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(t.TempDir(), "workspace")
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	// The quota's own state sorts before the step's: the step's cgroup
	// (whose jail holds the mount) must still go first.
	s := State{RunID: "r1", Step: QuotaStep("a"), PID: deadPID(t),
		Mounts: []string{ws}, Loops: []Loop{{Device: "/dev/loop7", Image: "/runs/r1/steps/a/workspace.img"}}, Dirs: []string{ws}}
	step := State{RunID: "r1", Step: "a", PID: deadPID(t), Cgroups: []string{"/agentsandbox/r1/a"}}
	busy := State{RunID: "r2", Step: "b", PID: deadPID(t),
		Mounts: []string{"/busy"}, Loops: []Loop{{Device: "/dev/loop8", Image: "/busy.img"}}}
	for _, st := range []State{s, step, busy} {
		if err := Write(dir, st); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Read(dir)
	if err != nil || len(got) != 3 || !reflect.DeepEqual(got[0].State, s) {
		t.Fatalf("Read = %+v, %v, want the state with its mounts and loops", got, err)
	}
	h := &fakeHost{fail: map[string]bool{"unmount /busy": true}}
	removed, err := gc(h, dir, "")
	if err == nil {
		t.Error("gc: no error for the mount that could not be undone")
	}
	want := []string{"cgroup /agentsandbox/r1/a", "unmount " + ws, "detach /dev/loop7 /runs/r1/steps/a/workspace.img", "unmount /busy"}
	if !reflect.DeepEqual(h.calls, want) {
		t.Errorf("calls = %q\nwant    %q", h.calls, want)
	}
	wantRemoved := []string{"cgroup /agentsandbox/r1/a", "mount " + ws, "loop /dev/loop7", "dir " + ws,
		"state " + filepath.Join(dir, s.FileName()), "state " + filepath.Join(dir, step.FileName())}
	if !reflect.DeepEqual(removed, wantRemoved) {
		t.Errorf("removed = %q\nwant      %q", removed, wantRemoved)
	}
	if left, _ := Read(dir); len(left) != 1 || left[0].State.RunID != "r2" {
		t.Errorf("states left = %+v, want only the busy one", left)
	}
}

// TestGCRuns: in one call, the state files go first and then the run
// directories of dead owners, each after its workspace quota is unmounted
// and every loop device serving one of its files detached; a live run, and
// a dead run with something else mounted below it, stay.
func TestGCRuns(t *testing.T) {
	stateDir := t.TempDir()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	live, dead, orphan, foreign := filepath.Join(root, "live"), filepath.Join(root, "dead"), filepath.Join(root, "orphan"), filepath.Join(root, "foreign")
	for _, d := range []string{live, dead, orphan, foreign} {
		if err := os.MkdirAll(filepath.Join(d, "steps", "s", "workspace"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteOwner(live, "live"); err != nil { // this process: alive
		t.Fatal(err)
	}
	for _, d := range []string{dead, foreign} {
		gone := New(filepath.Base(d), "run")
		gone.PID, gone.PIDStart = deadPID(t), 1
		b, _ := json.Marshal(gone)
		if err := os.WriteFile(filepath.Join(d, OwnerFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// orphan has no owner file: an apply killed before it wrote one.
	step := State{RunID: "dead", Step: "s", PID: deadPID(t), Cgroups: []string{"/agentsandbox/dead/s"}}
	if err := Write(stateDir, step); err != nil {
		t.Fatal(err)
	}
	ws := func(d string) string { return filepath.Join(d, "steps", "s", "workspace") }
	img := func(d string) string { return filepath.Join(d, "steps", "s", WorkspaceImage) }
	h := &fakeHost{
		table: []mount{
			{Point: "/", Source: "/dev/sda1"},
			{Point: ws(live), Source: "/dev/loop1"},
			{Point: ws(dead), Source: "/dev/loop2"},
			{Point: filepath.Join(foreign, "steps", "s", "other"), Source: "/dev/sdb1"},
		},
		attached: []Loop{
			{Device: "/dev/loop1", Image: img(live)},
			{Device: "/dev/loop2", Image: img(dead)},
			{Device: "/dev/loop3", Image: filepath.Join(dead, "quota-templates", "t.img")},
			{Device: "/dev/loop4", Image: "/elsewhere/dead/x.img"},
		},
	}
	removed, err := gc(h, stateDir, root)
	if err == nil || !strings.Contains(err.Error(), "steps/s/other is still mounted") {
		t.Errorf("gc: %v, want the foreign mount reported", err)
	}
	wantCalls := []string{"cgroup /agentsandbox/dead/s",
		"unmount " + ws(dead), "detach /dev/loop2 " + img(dead), "detach /dev/loop3 " + filepath.Join(dead, "quota-templates", "t.img")}
	if !reflect.DeepEqual(h.calls, wantCalls) {
		t.Errorf("calls = %q\nwant    %q", h.calls, wantCalls)
	}
	wantRemoved := []string{"cgroup /agentsandbox/dead/s", "state " + filepath.Join(stateDir, step.FileName()),
		"mount " + ws(dead), "loop /dev/loop2", "loop /dev/loop3", "dir " + dead, "dir " + orphan}
	if !reflect.DeepEqual(removed, wantRemoved) {
		t.Errorf("removed = %q\nwant      %q", removed, wantRemoved)
	}
	for d, want := range map[string]bool{live: true, dead: false, orphan: false, foreign: true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s: exists = %v, want %v", d, err == nil, want)
		}
	}
}

func TestParseMountInfo(t *testing.T) {
	for line, want := range map[string]mount{
		`36 35 7:3 / /var/lib/a\040b/runs/r/steps/s/workspace rw,nosuid,nodev shared:1 - ext4 /dev/loop3 rw`: {Point: "/var/lib/a b/runs/r/steps/s/workspace", Source: "/dev/loop3"},
		`21 26 0:20 / /proc rw,relatime - proc proc rw`:                                                      {Point: "/proc", Source: "proc"},
		`bad`: {},
	} {
		if got := parseMountInfo(line); got != want {
			t.Errorf("parseMountInfo(%q) = %+v, want %+v", line, got, want)
		}
	}
}

func TestIsQuotaMountShape(t *testing.T) {
	loops := []Loop{{Device: "/dev/loop0", Image: "/runs/r/steps/s/workspace.img"}}
	if !isQuotaMount(mount{Point: "/runs/r/steps/s/workspace", Source: "/dev/loop0"}, loops, "/runs/r") {
		t.Error("the run's quota was not seen")
	}
	for _, m := range []mount{
		{Point: "/runs/r/steps/s/workspace", Source: "/dev/sda1"},
		{Point: "/runs/r/steps/s/workspace", Source: "/dev/loop1"}, // serves no image
		{Point: "/runs/r/steps/s/other", Source: "/dev/loop0"},
		{Point: "/runs/r/inputs/workspace", Source: "/dev/loop0"},
		{Point: "/runs/r/steps/s/workspace/deeper", Source: "/dev/loop0"},
		{Point: "/runs/rr/steps/s/workspace", Source: "/dev/loop0"},
	} {
		if isQuotaMount(m, loops, "/runs/r") {
			t.Errorf("isQuotaMount(%+v) = true", m)
		}
	}
	// A loop device reused for another image is not the run's quota.
	if isQuotaMount(mount{Point: "/runs/r/steps/t/workspace", Source: "/dev/loop0"}, loops, "/runs/r") {
		t.Error("a mount whose device serves another step's image counted as a quota")
	}
}

func TestMountedBelow(t *testing.T) {
	if got := mountedBelow([]mount{{Point: "/"}, {Point: "/run/x/runs/a/steps/s/workspace"}}, "/run/x/runs/a"); got == "" {
		t.Error("a mount below the run directory was not seen")
	}
	if got := mountedBelow([]mount{{Point: "/run/x/runs/ab"}}, "/run/x/runs/a"); got != "" {
		t.Errorf("a sibling with a common prefix counted as below: %q", got)
	}
}

// TestGCTemplatesBesideRuns: gc of STATEDIR/runs also clears the template
// directory beside it (what goes is wsquota.GCTemplates's to decide; its
// own tests cover that) and reports it.
func TestGCTemplatesBesideRuns(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "runs")
	tdir := filepath.Join(base, QuotaTemplates)
	if TemplatesDir(root) != tdir || TemplatesDir(root+"/") != tdir {
		t.Fatalf("TemplatesDir(%s) = %s, want %s", root, TemplatesDir(root), tdir)
	}
	if err := os.MkdirAll(tdir, 0o700); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(tdir, fmt.Sprintf(".tmp-%d-x-y.img", deadPID(t)))
	if err := os.WriteFile(dead, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	removed, err := gc(&fakeHost{}, t.TempDir(), root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"template " + dead}; !reflect.DeepEqual(removed, want) {
		t.Errorf("removed = %q, want %q", removed, want)
	}
}

// TestGCRunsOwnerFileAfterCrash: an empty owner file (what a crash leaves
// of one never synced) is a dead owner; one that holds something else is
// reported and its directory left alone.
func TestGCRunsOwnerFileAfterCrash(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	empty, garbled := filepath.Join(root, "empty"), filepath.Join(root, "garbled")
	for d, content := range map[string]string{empty: "", garbled: "{not json"} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, OwnerFile), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := gc(&fakeHost{}, t.TempDir(), root)
	if err == nil || !strings.Contains(err.Error(), "read owner") {
		t.Errorf("gc: %v, want the garbled owner reported", err)
	}
	if want := []string{"dir " + empty}; !reflect.DeepEqual(removed, want) {
		t.Errorf("removed = %q, want %q", removed, want)
	}
	if _, err := os.Stat(garbled); err != nil {
		t.Errorf("the run with a garbled owner file went: %v", err)
	}
}
