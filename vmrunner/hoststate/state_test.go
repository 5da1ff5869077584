package hoststate

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := New("run/1", "build")
	if s.PID != os.Getpid() || s.PIDStart == 0 {
		t.Fatalf("New = %+v, want this process and its start time", s)
	}
	s.Netns = []string{"asb-run-build"}
	if err := Write(dir, s); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !reflect.DeepEqual(got[0].State, s) || filepath.Base(got[0].Path) != "state-run%2f1-build.json" {
		t.Fatalf("Read = %+v, want one state equal to %+v", got, s)
	}
	if !s.OwnerAlive() {
		t.Fatal("OwnerAlive = false for this process")
	}
	if err := Remove(dir, s); err != nil {
		t.Fatal(err)
	}
	if got, _ := Read(dir); len(got) != 0 {
		t.Fatalf("state left after Remove: %+v", got)
	}
	if err := Remove(dir, s); err != nil {
		t.Errorf("Remove of a missing state: %v", err)
	}
}

func TestReadRefusesUnknownFields(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "state-r-s.json"), []byte(`{"runId":"r","rm":"-rf /"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(dir); err == nil {
		t.Error("Read accepted a state file with an unknown field")
	}
	if got, err := Read(filepath.Join(dir, "missing")); err != nil || got != nil {
		t.Errorf("Read of a missing dir = %v, %v, want none", got, err)
	}
}

func TestOwner(t *testing.T) {
	dir := t.TempDir()
	if err := WriteOwner(dir, "r1"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, OwnerFile))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"runId":"r1","step":"run","pid":`
	if len(b) < len(want) || string(b[:len(want)]) != want {
		t.Errorf("owner file = %s, want it to start with %s", b, want)
	}
}
