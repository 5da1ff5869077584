package engine

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

func testRun(t *testing.T, logLimit int64) (*run, stepDirs) {
	t.Helper()
	store, err := record.OpenStore(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := newStepDirs(t.TempDir(), "s")
	if err != nil {
		t.Fatal(err)
	}
	return &run{o: Options{Store: store, LogLimit: logLimit}}, dirs
}

func readBlob(t *testing.T, s *record.Store, d record.Digest) string {
	t.Helper()
	r, err := s.OpenBlob(d)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCollectLogsHostile: logs the sandbox replaced with a symlink to a host
// file and with a FIFO are not read (and do not block); the step fails
// saying so.
func TestCollectLogsHostile(t *testing.T) {
	r, dirs := testRun(t, 0)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dirs.Control, guest.StdoutFile)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dirs.Control, guest.StderrFile), 0o644); err != nil {
		t.Fatal(err)
	}
	res := vmrunner.StepResult{Status: vmrunner.StatusSucceeded}
	sr := &record.Step{}
	done := make(chan error, 1)
	go func() { done <- r.collect(workflow.Step{Name: "s"}, dirs, &res, sr) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("collect blocked on a FIFO log")
	}
	if res.Status != vmrunner.StatusFailed || !strings.Contains(res.Detail, "log stdout.log was not read") ||
		!strings.Contains(res.Detail, "symlink") || !strings.Contains(res.Detail, "log stderr.log was not read") || !strings.Contains(res.Detail, "FIFO") {
		t.Errorf("status %s, detail %q", res.Status, res.Detail)
	}
	if got := readBlob(t, r.o.Store, sr.Logs.Stdout); got != "" {
		t.Errorf("stdout stored as %q, want empty", got)
	}
	if sr.Logs.Console != nil {
		t.Errorf("a console log was stored though there was none")
	}
}

func TestCollectLogKeepsHeadAndTail(t *testing.T) {
	r, dirs := testRun(t, 40)
	log := strings.Repeat("h", 20) + strings.Repeat("m", 60) + strings.Repeat("t", 20)
	if err := os.WriteFile(filepath.Join(dirs.Control, guest.StdoutFile), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dirs.Control, ConsoleFile), []byte("short"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := vmrunner.StepResult{Status: vmrunner.StatusSucceeded}
	sr := &record.Step{}
	if err := r.collect(workflow.Step{Name: "s"}, dirs, &res, sr); err != nil {
		t.Fatal(err)
	}
	if res.Status != vmrunner.StatusSucceeded {
		t.Fatalf("status %s (%s)", res.Status, res.Detail)
	}
	want := strings.Repeat("h", 20) + "\n[agentsandbox: 60 bytes of stdout.log left out here; the host keeps the first 20 and the last 20]\n" + strings.Repeat("t", 20)
	if got := readBlob(t, r.o.Store, sr.Logs.Stdout); got != want {
		t.Errorf("stored stdout %q\nwant %q", got, want)
	}
	if sr.Logs.StdoutTruncated != 60 || sr.Logs.StderrTruncated != 0 || sr.Logs.ConsoleTruncated != 0 {
		t.Errorf("truncated %d/%d/%d, want 60/0/0", sr.Logs.StdoutTruncated, sr.Logs.StderrTruncated, sr.Logs.ConsoleTruncated)
	}
	if sr.Logs.Console == nil || readBlob(t, r.o.Store, *sr.Logs.Console) != "short" {
		t.Errorf("console log not stored whole")
	}
}

func TestCollectOutputOverLimit(t *testing.T) {
	r, dirs := testRun(t, 0)
	f, err := os.Create(filepath.Join(dirs.Workspace, "big"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(1 << 30)
	f.Close()
	step := workflow.Step{Name: "s", Outputs: []string{"big"}, Resources: workflow.Resources{Disk: 16 << 20}}
	res := vmrunner.StepResult{Status: vmrunner.StatusSucceeded}
	sr := &record.Step{}
	if err := r.collect(step, dirs, &res, sr); err != nil {
		t.Fatal(err)
	}
	want := `output "big": file "big" is 1073741824 bytes, over the step's output limit of 16777216 bytes (resources.disk)`
	if res.Status != vmrunner.StatusFailed || res.Detail != want {
		t.Errorf("status %s, detail %q\nwant %q", res.Status, res.Detail, want)
	}
	if len(sr.Outputs) != 0 {
		t.Errorf("outputs %+v stored", sr.Outputs)
	}
}

func TestLineWriterStopsAtLimit(t *testing.T) {
	var lines []string
	w := newLineWriter(100, func(l string) { lines = append(lines, l) })
	for i := 0; i < 100; i++ {
		w.Write([]byte("0123456789\n"))
	}
	w.Flush()
	if len(lines) != 10 || !strings.Contains(lines[9], "more than 100 bytes") {
		t.Fatalf("lines %q, want 9 lines and a note", lines)
	}
}

// TestAssembleRefusesSymlinkedWorkspace: the workspace root itself is
// checked before it is chowned.
func TestAssembleRefusesSymlinkedWorkspace(t *testing.T) {
	testtier.Root(t)
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	if err := os.Mkdir(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(base, "ws")
	if err := os.Symlink(outside, ws); err != nil {
		t.Fatal(err)
	}
	if err := assemble(nil, ws, nil, 4242, 4242); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("assemble on a symlinked workspace: %v", err)
	}
	fi, _ := os.Stat(outside)
	if fi.Sys().(*syscall.Stat_t).Uid == 4242 {
		t.Fatal("the symlink's target was chowned")
	}
}

// TestCollectKeepsAFailedStatus: a log fault adds to why a step that timed
// out failed; it does not turn the timeout into a plain failure.
func TestCollectKeepsAFailedStatus(t *testing.T) {
	r, dirs := testRun(t, 0)
	if err := syscall.Mkfifo(filepath.Join(dirs.Control, guest.StdoutFile), 0o644); err != nil {
		t.Fatal(err)
	}
	res := vmrunner.StepResult{Status: vmrunner.StatusTimeout, Detail: "ran past its 1000 ms timeout"}
	sr := &record.Step{}
	if err := r.collect(workflow.Step{Name: "s"}, dirs, &res, sr); err != nil {
		t.Fatal(err)
	}
	if res.Status != vmrunner.StatusTimeout || !strings.HasPrefix(res.Detail, "ran past its 1000 ms timeout; log stdout.log was not read") {
		t.Errorf("status %s, detail %q", res.Status, res.Detail)
	}
}
