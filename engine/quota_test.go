package engine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/fakebackend"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/vmrunner/sandbox"
	"github.com/agentsandbox/agentsandbox/vmrunner/wsquota"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// needQuota makes a root test that mounts workspace quotas fail (in CI) or
// skip when the host cannot have them.
func needQuota(t *testing.T) {
	t.Helper()
	testtier.Root(t)
	if _, err := wsquota.FindMkfs(); err != nil {
		testtier.Skip(t, "root", err.Error())
	}
	if _, err := os.Stat(wsquota.LoopControl); err != nil {
		testtier.Skip(t, "root", wsquota.ErrNoLoop.Error())
	}
}

const quotaYAML = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: quota
steps:
  - name: fill
    run: |
      df -k . | tail -1
      dd if=/dev/zero of=big bs=1M count=513 2>&1; s=$?
      echo "dd exit $s, big is $(wc -c < big) bytes"
      exit $s
    resources: {disk: 16MiB, timeout: 60s}
  - name: files
    run: |
      i=0
      while [ $i -lt 100000 ]; do printf '' > f$i || { echo "stopped at $i files"; exit 3; }; i=$((i+1)); done
      echo "made $i files"
    resources: {disk: 16MiB, timeout: 120s}
  - name: budget
    run: |
      i=0
      while [ $i -lt 100000 ]; do printf '' > f$i || { echo "stopped at $i files"; exit 3; }; i=$((i+1)); done
    resources: {disk: 16MiB, diskInodes: 3000, timeout: 120s}
  - name: fits
    run: dd if=/dev/zero of=ok bs=1M count=8 2>/dev/null && echo fits
    outputs: [ok]
    resources: {disk: 16MiB, timeout: 60s}
`

// TestRootQuotaInPipeline is the repro through Run: /workspace
// took 513 MiB with disk 16MiB, and 100,000 files. Now the first write
// ends at ENOSPC below 16 MiB, the files stop at the inode budget, a step
// within its disk succeeds, and nothing of the quotas is left afterwards.
func TestRootQuotaInPipeline(t *testing.T) {
	needQuota(t)
	f := newFixture(t, quotaYAML)
	var mu sync.Mutex
	logs := map[string]string{}
	o := f.options(t, fakebackend.New(), func(e Event) {
		if e.Kind == EventLog {
			mu.Lock()
			logs[e.Step] += e.Line + "\n"
			mu.Unlock()
		}
	})
	o.HostStateDir = t.TempDir()
	res, err := Run(context.Background(), f.w, o)
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, s := range res.Record.Steps {
		status[s.Name] = string(s.Status)
		t.Logf("%s: %s exit %d %s\n%s", s.Name, s.Status, s.ExitCode, s.Detail, logs[s.Name])
	}
	if status["fill"] != string(record.StatusFailed) || !strings.Contains(logs["fill"], "No space left on device") {
		t.Errorf("fill: %s, want failed with ENOSPC", status["fill"])
	}
	var big int64
	if _, err := fmt.Sscanf(logs["fill"][strings.Index(logs["fill"], "big is"):], "big is %d bytes", &big); err != nil || big >= 16<<20 {
		t.Errorf("fill wrote %d bytes (%v), want less than 16 MiB", big, err)
	}
	if status["files"] != string(record.StatusFailed) || !strings.Contains(logs["files"], "stopped at") {
		t.Errorf("files: %s, want stopped at the inode budget", status["files"])
	}
	var budget int
	if i := strings.Index(logs["budget"], "stopped at"); i < 0 {
		t.Errorf("budget: %s, want stopped at its diskInodes", status["budget"])
	} else if _, err := fmt.Sscanf(logs["budget"][i:], "stopped at %d files", &budget); err != nil || budget < 2900 || budget > 3100 {
		t.Errorf("budget: stopped at %d files (%v), want about its diskInodes 3000", budget, err)
	}
	if status["fits"] != string(record.StatusSucceeded) {
		t.Errorf("fits: %s, want succeeded", status["fits"])
	}
	assertNoQuotaLeft(t, f.dir, o.HostStateDir)
}

// assertNoQuotaLeft fails when a mount, a loop device, a state file or a
// run directory of the runs under dir is left.
func assertNoQuotaLeft(t *testing.T, dir, stateDir string) {
	t.Helper()
	if m := mountBelow(t, dir); m != "" {
		t.Errorf("mount left: %s", m)
	}
	loops, _ := filepath.Glob("/sys/block/loop*")
	for _, l := range loops {
		if back, _ := wsquota.BackingFile("/dev/" + filepath.Base(l)); strings.HasPrefix(back, dir+"/") {
			t.Errorf("loop device %s left serving %s", filepath.Base(l), back)
		}
	}
	if ents, _ := os.ReadDir(stateDir); len(ents) > 0 {
		t.Errorf("state files left: %v", ents)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "runs")); len(ents) > 0 {
		t.Errorf("run directories left: %v", ents)
	}
}

// quotaChildEnv makes the test binary a stand-in apply that mounts one
// workspace quota the way Run does, says so, and waits to be killed.
const quotaChildEnv = "_AGENTSANDBOX_TEST_QUOTA_CHILD"

func TestQuotaChild(t *testing.T) {
	spec := os.Getenv(quotaChildEnv)
	if spec == "" {
		t.Skip("helper process for TestRootQuotaGCAfterKill")
	}
	runRoot, stateDir, _ := strings.Cut(spec, ":")
	runDir := filepath.Join(runRoot, "killed")
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := hoststate.WriteOwner(runDir, "killed"); err != nil {
		t.Fatal(err)
	}
	dirs, err := newStepDirs(runDir, "s")
	if err != nil {
		t.Fatal(err)
	}
	ws := sandbox.NewWorkspaces(stateDir, "killed", runDir)
	if err := ws.Mount(context.Background(), workflow.Step{Name: "s", Resources: workflow.Resources{Disk: 8 << 20}}, dirs.Workspace); err != nil {
		t.Fatal(err)
	}
	fmt.Println("mounted")
	time.Sleep(time.Minute)
}

// TestRootQuotaGCAfterKill: an apply killed with SIGKILL leaves its
// workspace mounted on a loop device; gc (the state file's entries, then
// the run directories) leaves no mount, no loop device and no directory.
func TestRootQuotaGCAfterKill(t *testing.T) {
	needQuota(t)
	root, stateDir := t.TempDir(), t.TempDir()
	runRoot := filepath.Join(root, "runs")
	for _, gc := range []string{"state", "runs-only"} {
		t.Run(gc, func(t *testing.T) {
			killChild(t, runRoot, stateDir)
			ws := filepath.Join(runRoot, "killed", "steps", "s", "workspace")
			if mountBelow(t, ws) == "" {
				t.Fatalf("the killed child's workspace %s is not mounted", ws)
			}
			// What `agentsandbox gc` does: the state files, then the run
			// directories; without a state file, the run directories alone.
			if gc == "runs-only" {
				if err := os.RemoveAll(stateDir); err != nil { // a state file lost
					t.Fatal(err)
				}
			}
			removed, err := hoststate.GC(stateDir, runRoot)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("gc removed %q", removed)
			assertNoQuotaLeft(t, root, stateDir)
			if _, err := os.Stat(filepath.Join(runRoot, "killed")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("run directory left (%v)", err)
			}
		})
	}
}

func killChild(t *testing.T, runRoot, stateDir string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestQuotaChild$", "-test.v")
	cmd.Env = append(os.Environ(), quotaChildEnv+"="+runRoot+":"+stateDir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var seen []string
	for sc.Scan() {
		seen = append(seen, sc.Text())
		if sc.Text() == "mounted" {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if len(seen) == 0 || seen[len(seen)-1] != "mounted" {
		t.Fatalf("child never mounted its workspace: %q", seen)
	}
}

// mountBelow returns a mount point at or below dir, or "".
func mountBelow(t *testing.T, dir string) string {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(l); len(f) > 4 {
			if p := strings.ReplaceAll(f[4], `\040`, " "); p == dir || strings.HasPrefix(p, dir+"/") {
				return p
			}
		}
	}
	return ""
}
