package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	nt "github.com/agentsandbox/agentsandbox/internal/nartest"
	"github.com/agentsandbox/agentsandbox/record"
)

// forgeNestedOutputs stores, in a fresh state directory, the record of
// issue 23: step build has an output d whose NAR holds a symlink x to
// victim, and a second output d/x/file. Every blob is present and intact;
// only the layout is a lie. It returns the state directory and the id.
func forgeNestedOutputs(t *testing.T, victim string) (string, record.ID) {
	t.Helper()
	state := t.TempDir()
	s, err := record.OpenStore(state)
	if err != nil {
		t.Fatal(err)
	}
	put := func(n nt.Node) record.NarHash {
		d, _, err := s.PutBlob(bytes.NewReader(n.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		return record.NarHash(d)
	}
	r := &record.Record{Version: record.Version, Steps: []record.Step{{
		Name:   "build",
		Status: record.StatusSucceeded,
		Outputs: []record.Output{
			{Path: "d", NarHash: put(nt.Dir(nt.E("x", nt.Symlink(victim))))},
			{Path: "d/x/file", NarHash: put(nt.File("pwned\n"))},
		},
	}}}
	id, err := s.Put(r)
	if err != nil {
		t.Fatal(err)
	}
	return state, id
}

// TestRecordsExportForgedNestedOutputs: a store received from elsewhere
// holds a record whose second output lies beneath a symlink its first
// output restores. records verify calls it unsafe and fails; records
// export refuses it before writing anything, naming the output and how to
// list the rest; nothing is created outside --to, nor in it.
func TestRecordsExportForgedNestedOutputs(t *testing.T) {
	victim := t.TempDir()
	state, id := forgeNestedOutputs(t, victim)

	code, out, stderr := execute(t, "records", "verify", "--state-dir", state, id.String())
	if code != ExitStepFailed || !strings.Contains(stderr, `unsafe: step build: output d/x/file`) || !strings.Contains(stderr, `lies inside output "d" of step "build"`) {
		t.Errorf("records verify: exit %d, want %d calling d/x/file unsafe\n%s\n%s", code, ExitStepFailed, out, stderr)
	}

	to := filepath.Join(t.TempDir(), "export")
	code, out, stderr = execute(t, "records", "export", "--state-dir", state, id.String(), "--to", to)
	if code != ExitStepFailed {
		t.Errorf("records export: exit %d, want %d\n%s\n%s", code, ExitStepFailed, out, stderr)
	}
	for _, want := range []string{"nothing exported", `step "build" output "d/x/file"`, `lies inside output "d" of step "build"`, "outputs may not nest", "agentsandbox records verify " + id.String()} {
		if !strings.Contains(stderr, want) {
			t.Errorf("records export's error lacks %q:\n%s", want, stderr)
		}
	}
	if out != "" {
		t.Errorf("records export printed paths: %q", out)
	}
	if entries, _ := os.ReadDir(victim); len(entries) != 0 {
		t.Fatalf("records export wrote outside --to: %v", entries)
	}
	if entries, _ := os.ReadDir(to); len(entries) != 0 {
		t.Errorf("records export wrote into --to: %v", entries)
	}
}

// TestRecordsExportWritesNoSymlinkTarget: records export of an honest
// record (outputs apart) restores symlinks as symlinks and refuses to put
// an output where --to already holds something, even a symlink out.
func TestRecordsExportWritesNoSymlinkTarget(t *testing.T) {
	victim := t.TempDir()
	state := t.TempDir()
	s, err := record.OpenStore(state)
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := s.PutBlob(bytes.NewReader(nt.Dir(nt.E("link", nt.Symlink(victim))).Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := s.PutBlob(bytes.NewReader(nt.File("data\n").Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Put(&record.Record{Version: record.Version, Steps: []record.Step{{
		Name: "build", Status: record.StatusSucceeded,
		Outputs: []record.Output{{Path: "a", NarHash: record.NarHash(d)}, {Path: "b/file", NarHash: record.NarHash(f)}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := execute(t, "records", "verify", "--state-dir", state, id.String()); code != ExitOK {
		t.Fatalf("records verify of an honest record: exit %d\n%s", code, stderr)
	}
	to := t.TempDir()
	code, out, stderr := execute(t, "records", "export", "--state-dir", state, id.String(), "--to", to)
	if code != ExitOK || out != filepath.Join(to, "build", "a")+"\n"+filepath.Join(to, "build", "b", "file")+"\n" {
		t.Fatalf("records export: exit %d\n%s\n%s", code, out, stderr)
	}
	if target, err := os.Readlink(filepath.Join(to, "build", "a", "link")); err != nil || target != victim {
		t.Errorf("the exported symlink is %q, %v", target, err)
	}

	// Again into a directory where the job of some earlier export (or
	// anyone) left build/b as a symlink out: refused, nothing written.
	to2 := t.TempDir()
	if err := os.Mkdir(filepath.Join(to2, "build"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(to2, "build", "b")); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = execute(t, "records", "export", "--state-dir", state, id.String(), "--to", to2)
	if code != ExitStepFailed || !strings.Contains(stderr, "goes through a symlink") || out != filepath.Join(to2, "build", "a")+"\n" {
		t.Errorf("records export beneath a planted symlink: exit %d\n%s\n%s", code, out, stderr)
	}
	if entries, _ := os.ReadDir(victim); len(entries) != 0 {
		t.Fatalf("records export wrote through the symlink: %v", entries)
	}
	// And an existing output is never overwritten.
	code, _, stderr = execute(t, "records", "export", "--state-dir", state, id.String(), "--to", to)
	if code == ExitOK || !strings.Contains(stderr, "already exists") {
		t.Errorf("records export over an earlier export: exit %d\n%s", code, stderr)
	}
}
