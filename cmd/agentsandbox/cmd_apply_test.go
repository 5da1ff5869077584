package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
)

// lastLine is the record id apply prints last.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func TestApplyHelloRecordVerifyAndTamper(t *testing.T) {
	testtier.Root(t)
	state := t.TempDir()
	code, out, stderr := execute(t, "apply", "--isolation", "namespace", "--state-dir", state, "../../examples/hello.yaml")
	if code != ExitOK {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, stderr)
	}
	if !strings.Contains(out, "hello  succeeded") || !strings.Contains(stderr, "[hello] hello") {
		t.Errorf("summary or progress missing:\n%s\n%s", out, stderr)
	}
	id := lastLine(out)
	if code, vout, verr := execute(t, "records", "verify", "--state-dir", state, id[:8]); code != ExitOK {
		t.Fatalf("verify: exit %d\n%s%s", code, vout, verr)
	}
	if code, lout, _ := execute(t, "records", "list", "--state-dir", state); code != ExitOK || !strings.Contains(lout, id) {
		t.Errorf("list: exit %d\n%s", code, lout)
	}

	// Edit one byte of the stdout log blob: verify names it and fails.
	blobs, _ := filepath.Glob(filepath.Join(state, "blobs", "*", "*"))
	var tampered string
	for _, b := range blobs {
		data, err := os.ReadFile(b)
		if err == nil && string(data) == "hello\n" {
			tampered = b
			data[0] = 'j'
			os.Chmod(b, 0o644)
			if err := os.WriteFile(b, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if tampered == "" {
		t.Fatalf("no blob holds the step's stdout; blobs: %v", blobs)
	}
	code, _, verr := execute(t, "records", "verify", "--state-dir", state, id)
	if code != ExitStepFailed || !strings.Contains(verr, "stdout") {
		t.Fatalf("verify after tampering a blob: exit %d\n%s", code, verr)
	}
}

func TestApplyExitStatuses(t *testing.T) {
	testtier.Root(t)
	dir := t.TempDir()
	cases := []struct {
		name, yaml string
		want       int
	}{
		{"step fails", "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: f\nsteps:\n  - name: f\n    run: exit 7\n    resources: {timeout: 30s}\n", ExitStepFailed},
		{"invalid", "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: f\nsteps:\n  - name: f\n    rnu: x\n", ExitInvalid},
		{"denied", "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: f\nsteps:\n  - name: f\n    run: x\n    resources: {vcpu: 64, timeout: 30s}\n", ExitDenied},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".yaml")
			if err := os.WriteFile(p, []byte(c.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			code, out, stderr := execute(t, "apply", "--isolation", "namespace", "--state-dir", filepath.Join(dir, "state"), p)
			if code != c.want {
				t.Fatalf("exit %d, want %d\n%s\n%s", code, c.want, out, stderr)
			}
		})
	}
}

// TestApplySIGINTLeavesNothing runs the real binary, interrupts it while a
// step's job runs, and checks that no netns, cgroup, mount, hypervisor or
// run directory of it is left, in namespace isolation and in a VM.
func TestApplySIGINTLeavesNothing(t *testing.T) {
	t.Run("namespace", func(t *testing.T) { testApplySIGINT(t, "namespace", "") })
	t.Run("vm", func(t *testing.T) { testApplySIGINT(t, "vm", vmFlake(t, "sleeper")) })
}

func testApplySIGINT(t *testing.T, isolation, flake string) {
	testtier.Root(t)
	dir := t.TempDir()
	bin := buildCLI(t, dir)
	wf := filepath.Join(dir, "sleep.yaml")
	// The namespace step has egress too, so that its room (firewall,
	// resolver and proxy listeners in its namespace) is part of what must
	// go. It connects nowhere.
	net := ""
	if isolation == "namespace" {
		net = "    network: {allow: [\"api.example.test:443\"]}\n"
	}
	os.WriteFile(wf, []byte("apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: sleepy\nsteps:\n  - name: sleeper\n    run: echo job-running; sleep 300\n"+net+"    resources: {timeout: 10m, bandwidth: 8Mbit}\n"), 0o644)
	state := filepath.Join(dir, "state")

	args := []string{"apply", "--isolation", isolation, "--state-dir", state}
	if flake != "" {
		args = append(args, "--flake", flake, "--offline")
	}
	a := startApply(t, bin, append(args, wf)...)
	a.waitFor(t, "[sleeper] job-running", 3*time.Minute)
	cmd, stdout := a.cmd, a.stdout
	run := runningRunID(t, state)
	stepCgroup := hoststate.CgroupPath(run, "sleeper")
	time.Sleep(300 * time.Millisecond)
	if isolation == "vm" && len(stepProcesses(t, "qemu-system", stepCgroup)) == 0 {
		t.Errorf("no hypervisor found in the step's cgroup while the job runs: the leftover check below would prove nothing")
	}
	cmd.Process.Signal(syscall.SIGINT)
	err := a.wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != ExitInfra {
		t.Errorf("apply after SIGINT: %v, want exit %d", err, ExitInfra)
	}
	assertStepLeftNothing(t, run, "sleeper", state)
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), hoststate.JailRoot("/run/agentsandbox/jails", run, "sleeper")) {
		t.Errorf("jail mounts left:\n%s", mounts)
	}
	if pids := stepProcesses(t, "qemu-system", stepCgroup); len(pids) > 0 {
		t.Errorf("hypervisor processes of the step left: %v", pids)
	}
	if vms, _ := filepath.Glob(hoststate.VMWorkDir("/run/agentsandbox/vms", run, "sleeper") + "*"); len(vms) != 0 {
		t.Errorf("VM working directories left: %v", vms)
	}
	// The interrupted run is still recorded.
	if id := lastLine(stdout.String()); len(id) != 52 {
		t.Errorf("no record id printed after SIGINT: %q", stdout.String())
	}
}

// runningRunID is the id of the one apply running with the state
// directory state (its run directory's name).
func runningRunID(t *testing.T, state string) string {
	t.Helper()
	runs, _ := os.ReadDir(filepath.Join(state, "runs"))
	if len(runs) != 1 {
		t.Fatalf("run directories while the step runs: %v, want one (else the checks after it prove nothing)", runs)
	}
	return runs[0].Name()
}

// stepProcesses lists processes whose command starts with comm and whose
// cgroup path ends with suffix (a step's cgroup is /agentsandbox/RUN/STEP).
func stepProcesses(t *testing.T, comm, suffix string) []string {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var out []string
	for _, p := range procs {
		c, err := os.ReadFile(filepath.Join(p, "comm"))
		if err != nil || !strings.HasPrefix(string(c), comm) {
			continue
		}
		cg, _ := os.ReadFile(filepath.Join(p, "cgroup"))
		for _, line := range strings.Split(string(cg), "\n") {
			if strings.HasSuffix(line, suffix) {
				out = append(out, filepath.Base(p))
				break
			}
		}
	}
	return out
}

// buildCLI builds the agentsandbox binary into dir.
func buildCLI(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "agentsandbox")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// runningApply is an apply process of the real binary whose stderr (the
// progress lines, warnings and errors) is watched.
type runningApply struct {
	cmd    *exec.Cmd
	stdout *bytes.Buffer
	mu     sync.Mutex
	stderr bytes.Buffer
	lines  chan string
	done   chan struct{}
	err    error
}

func startApply(t *testing.T, bin string, args ...string) *runningApply {
	t.Helper()
	a := &runningApply{cmd: exec.Command(bin, args...), stdout: &bytes.Buffer{}, lines: make(chan string, 1024), done: make(chan struct{})}
	a.cmd.Stdout = a.stdout
	pipe, err := a.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.cmd.Process.Kill(); <-a.done })
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			a.mu.Lock()
			a.stderr.WriteString(sc.Text() + "\n")
			a.mu.Unlock()
			select {
			case a.lines <- sc.Text():
			default:
			}
		}
		a.err = a.cmd.Wait()
		close(a.done)
	}()
	return a
}

// waitFor waits for a stderr line containing want. If apply ends first,
// or the limit passes, the test fails at once and shows what apply printed
// (for a VM, the console): a job that will not start never costs minutes.
func (a *runningApply) waitFor(t *testing.T, want string, limit time.Duration) {
	t.Helper()
	deadline := time.After(limit)
	for {
		select {
		case l := <-a.lines:
			if strings.Contains(l, want) {
				return
			}
		case <-a.done:
			t.Fatalf("apply ended (%v) before printing %q:\n%s%s", a.err, want, a.stdout, a.stderrText())
		case <-deadline:
			a.cmd.Process.Kill()
			<-a.done
			t.Fatalf("apply did not print %q within %v:\n%s", want, limit, a.stderrText())
		}
	}
}

func (a *runningApply) stderrText() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stderr.String()
}

// wait waits for apply to end and returns cmd.Wait's error.
func (a *runningApply) wait() error {
	<-a.done
	return a.err
}
