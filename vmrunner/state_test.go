package vmrunner

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
)

func TestStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := NewState("run/1", "build")
	if s.PID != os.Getpid() || s.PIDStart == 0 {
		t.Fatalf("NewState = %+v, want this process and its start time", s)
	}
	s.Netns = []string{"asb-run-build"}
	if err := WriteState(dir, s); err != nil {
		t.Fatal(err)
	}
	got, err := ReadStates(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !reflect.DeepEqual(got[0].State, s) || filepath.Base(got[0].Path) != "state-run%2f1-build.json" {
		t.Fatalf("ReadStates = %+v, want one state equal to %+v", got, s)
	}
	if !s.OwnerAlive() {
		t.Fatal("OwnerAlive = false for this process")
	}
	if err := RemoveState(dir, s); err != nil {
		t.Fatal(err)
	}
	if got, _ := ReadStates(dir); len(got) != 0 {
		t.Fatalf("state left after RemoveState: %+v", got)
	}
}

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
	alive := NewState("r2", "b")
	alive.Netns = []string{"asb-r2-b"}
	// The pid is alive but started at another time: a reused pid.
	reused := State{RunID: "r3", Step: "c", PID: os.Getpid(), PIDStart: 1, Netns: []string{"asb-r3-c"}}
	failing := State{RunID: "r4", Step: "d", PID: deadPID(t), Netns: []string{"asb-bad"}}
	for _, s := range []State{dead, alive, reused, failing} {
		if err := WriteState(dir, s); err != nil {
			t.Fatal(err)
		}
	}
	var calls []string
	rm := Remover{
		Netns: func(n string) error {
			calls = append(calls, "netns "+n)
			if n == "asb-bad" {
				return errors.New("busy")
			}
			return nil
		},
		Cgroup: func(p string) error { calls = append(calls, "cgroup "+p); return nil },
	}
	removed, err := GC(dir, rm)
	if err == nil {
		t.Fatal("GC: no error for the failing netns")
	}
	want := []string{"cgroup /agentsandbox/r1/a", "netns asb-r1-a", "netns asb-r3-c", "dir " + mount,
		"state " + filepath.Join(dir, dead.FileName()), "state " + filepath.Join(dir, reused.FileName())}
	if !reflect.DeepEqual(removed, want) {
		t.Errorf("removed = %q\nwant      %q", removed, want)
	}
	if _, err := os.Stat(mount); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir %s still there: %v", mount, err)
	}
	left, _ := ReadStates(dir)
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
	s := State{RunID: "r1", Step: "a/workspace", PID: deadPID(t),
		Mounts: []string{ws}, Loops: []Loop{{Device: "/dev/loop7", Image: "/runs/r1/steps/a/workspace.img"}}, Dirs: []string{ws}}
	step := State{RunID: "r1", Step: "a", PID: deadPID(t), Cgroups: []string{"/agentsandbox/r1/a"}}
	busy := State{RunID: "r2", Step: "b", PID: deadPID(t),
		Mounts: []string{"/busy"}, Loops: []Loop{{Device: "/dev/loop8", Image: "/busy.img"}}}
	for _, st := range []State{s, step, busy} {
		if err := WriteState(dir, st); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadStates(dir)
	if err != nil || len(got) != 3 || !reflect.DeepEqual(got[0].State, s) {
		t.Fatalf("ReadStates = %+v, %v, want the state with its mounts and loops", got, err)
	}
	var calls []string
	rm := Remover{
		Cgroup: func(p string) error { calls = append(calls, "cgroup "+p); return nil },
		Unmount: func(d string) error {
			calls = append(calls, "unmount "+d)
			if d == "/busy" {
				return errors.New("busy")
			}
			return nil
		},
		Detach: func(dev, img string) error { calls = append(calls, "detach "+dev+" "+img); return nil },
	}
	removed, err := GC(dir, rm)
	if err == nil {
		t.Error("GC: no error for the mount that could not be undone")
	}
	want := []string{"cgroup /agentsandbox/r1/a", "unmount " + ws, "detach /dev/loop7 /runs/r1/steps/a/workspace.img", "unmount /busy"}
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("calls = %q\nwant    %q", calls, want)
	}
	wantRemoved := []string{"cgroup /agentsandbox/r1/a", "mount " + ws, "loop /dev/loop7", "dir " + ws,
		"state " + filepath.Join(dir, s.FileName()), "state " + filepath.Join(dir, step.FileName())}
	if !reflect.DeepEqual(removed, wantRemoved) {
		t.Errorf("removed = %q\nwant      %q", removed, wantRemoved)
	}
	if left, _ := ReadStates(dir); len(left) != 1 || left[0].State.RunID != "r2" {
		t.Errorf("states left = %+v, want only the busy one", left)
	}
}
