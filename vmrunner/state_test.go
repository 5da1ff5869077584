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
	want := []string{"cgroup /agentsandbox/r1/a", "netns asb-r1-a", "dir " + mount,
		"state " + filepath.Join(dir, dead.FileName()), "netns asb-r3-c", "state " + filepath.Join(dir, reused.FileName())}
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
