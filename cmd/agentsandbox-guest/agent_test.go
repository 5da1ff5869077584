//go:build linux

package main

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// buildStatic builds the agent the way it ships: CGO_ENABLED=0.
func buildStatic(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agentsandbox-guest")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func writeJob(t *testing.T, dir string, job guest.Job) {
	t.Helper()
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, guest.JobFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestBinaryIsStaticAndRunsAJob(t *testing.T) {
	bin := buildStatic(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("agent binary has a %v program header: it is not static", p.Type)
		}
	}
	f.Close()

	dir := t.TempDir()
	writeJob(t, dir, guest.Job{
		Version: guest.ProtocolVersion, Step: "s", Command: []string{"sh", "-c", "echo hello; exit 4"},
		Env: []string{"PATH=/usr/bin:/bin"}, Workdir: "/", UID: os.Getuid(), GID: os.Getgid(),
	})
	var stdout bytes.Buffer
	cmd := exec.Command(bin, dir)
	cmd.Stdout = &stdout
	cmd.Stderr = &stdout
	if err := cmd.Run(); err != nil {
		t.Fatalf("agent: %v (a job's own failure must not fail the agent)\n%s", err, stdout.String())
	}
	want := guest.ConsoleStartLine + "\nhello\n" + guest.ConsoleEndLine + " exit=4\n"
	if stdout.String() != want {
		t.Errorf("console:\n%s\nwant:\n%s", stdout.String(), want)
	}
	b, err := os.ReadFile(filepath.Join(dir, guest.ResultFile))
	if err != nil {
		t.Fatal(err)
	}
	var res guest.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 4 || res.Step != "s" {
		t.Errorf("result %+v", res)
	}
}

func TestAgentExitStatus(t *testing.T) {
	if got := agentMain([]string{"a", "b"}); got != exitUsage {
		t.Errorf("two arguments: exit %d, want %d", got, exitUsage)
	}
	if got := agentMain([]string{filepath.Join(t.TempDir(), "missing")}); got != exitNoResult {
		t.Errorf("unwritable control dir: exit %d, want %d", got, exitNoResult)
	}
	// A control dir without job.json still gets a result that says why.
	dir := t.TempDir()
	if got := agentMain([]string{dir}); got != exitResultWritten {
		t.Errorf("missing job: exit %d, want %d", got, exitResultWritten)
	}
	if _, err := os.Stat(filepath.Join(dir, guest.ResultFile)); err != nil {
		t.Error(err)
	}
}

func TestParseModules(t *testing.T) {
	in := "# load order matters\n/lib/modules/virtio_ring.ko\n\n  /lib/modules/9p.ko.xz  \n"
	got, err := parseModules(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/lib/modules/virtio_ring.ko", "/lib/modules/9p.ko.xz"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// As PID 1 of a throwaway pid and mount namespace, chrooted into an empty
// directory, the agent sets up /proc, /sys, /dev, /tmp, fails to mount the
// 9p share (there is none), says so on the console and powers off, which in
// a pid namespace ends its init instead of the machine.
func TestPID1SetupErrorPowersOff(t *testing.T) {
	testtier.Root(t)
	unshare := testtier.Command(t, "root", "unshare", "apt-get install util-linux")
	root := t.TempDir()
	bin := buildStatic(t)
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "init"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, unshare, "--pid", "--fork", "--mount", "--root="+root, "/init")
	out, _ := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("agent as PID 1 did not end: %s", out)
	}
	s := string(out)
	t.Logf("console:\n%s", s)
	if !strings.Contains(s, guest.ConsoleErrorLine+" mount 9p share "+guest.ControlTag) {
		t.Errorf("console lacks the mount error:\n%s", s)
	}
	if strings.Contains(s, "halt:") || strings.Contains(s, "panic") {
		t.Errorf("power off did not end PID 1 cleanly:\n%s", s)
	}
	for _, d := range []string{"proc", "sys", "dev", "tmp", strings.TrimPrefix(guest.ControlMount, "/")} {
		if _, err := os.Stat(filepath.Join(root, d)); err != nil {
			t.Errorf("agent did not create /%s: %v", d, err)
		}
	}
}
