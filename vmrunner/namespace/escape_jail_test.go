package namespace

// Escape tests for the jail's own set-up (issue 11): the caller's terminal,
// inherited descriptors, keyrings, rlimits and the system calls the seccomp
// filter refuses. Each runs as an attacker would: a real step in the
// namespace backend, started from a process that has what a careless caller
// has (a controlling terminal, a stray descriptor 9 on a host file, its own
// session keyring, generous rlimits), whose job is a probe that tries each
// way out and prints what happened.
//
// The probe is this test binary, copied into the step's workspace and run
// as the job (TestEscapeHelper with AGENTSANDBOX_ESCAPE_HELPER=probe). The
// caller is this test binary too (AGENTSANDBOX_ESCAPE_HELPER=runner), started
// with a pty as its controlling terminal and the host file at descriptor 9;
// it runs two steps, one with the default filter and one with keyctl
// allowed (to read the job's session keyring), and prints their probes'
// output. The tests below read that output, one class each.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/runnertest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/seccomp"
	"github.com/agentsandbox/agentsandbox/workflow"
	"golang.org/x/sys/unix"
)

const (
	envEscapeHelper = "AGENTSANDBOX_ESCAPE_HELPER"
	envEscapeDir    = "AGENTSANDBOX_ESCAPE_DIR"
	// escapeFD is the stray descriptor the caller holds, not close-on-exec.
	escapeFD = 9
	// escapeDisk is the steps' disk, which RLIMIT_FSIZE must be.
	escapeDisk = 64 << 20
)

// TestEscapeHelper is not a test: it is the probe and the runner, when
// the environment says so, and does nothing otherwise.
func TestEscapeHelper(t *testing.T) {
	switch os.Getenv(envEscapeHelper) {
	case "probe":
		escapeProbe()
	case "runner":
		escapeRunner(t)
	}
}

// escapeProbe runs in the jail as the job. Every line it prints is
// "probe KEY=VALUE"; errors are spelled as errno names where there is one.
func escapeProbe() {
	say := func(k, v string) { fmt.Printf("probe %s=%s\n", k, v) }
	res := func(err error) string {
		if err == nil {
			return "ok"
		}
		if e, ok := err.(unix.Errno); ok {
			return unix.ErrnoName(e)
		}
		if e, ok := err.(*os.PathError); ok {
			if en, ok := e.Err.(unix.Errno); ok {
				return unix.ErrnoName(en)
			}
		}
		return err.Error()
	}
	errno := func(e unix.Errno) error {
		if e == 0 {
			return nil
		}
		return e
	}

	// Namespaces: unshare and clone with CLONE_NEWUSER.
	say("unshare-newuser", res(unix.Unshare(unix.CLONE_NEWUSER)))
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}
	err := cmd.Run()
	if pe, ok := err.(*os.PathError); ok {
		err = pe.Err
	}
	say("clone-newuser", res(err))

	// Keyrings.
	id, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, false)
	if err == nil {
		say("session-keyring", strconv.Itoa(id))
	} else {
		say("session-keyring", res(err))
	}
	_, err = unix.AddKey("user", "planted", []byte("by the job"), unix.KEY_SPEC_USER_KEYRING)
	say("add-key-user", res(err))

	// io_uring, perf, userfaultfd, bpf.
	var params [120]byte
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	say("io_uring_setup", res(errno(e)))
	if e == 0 {
		unix.Close(int(fd))
	}
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_TASK_CLOCK,
		Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})), Bits: unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv}
	pfd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	say("perf_event_open", res(err))
	if err == nil {
		unix.Close(pfd)
	}
	const uffdUserModeOnly = 1
	fd, _, e = unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|uffdUserModeOnly, 0, 0)
	say("userfaultfd", res(errno(e)))
	if e == 0 {
		unix.Close(int(fd))
	}

	// The terminal: no /dev/tty, no controlling terminal, no TIOCSTI.
	f, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	say("open-dev-tty", res(err))
	if err == nil {
		c := byte('x')
		say("tiocsti-dev-tty", res(errno(ioctlPtr(int(f.Fd()), unix.TIOCSTI, unsafe.Pointer(&c)))))
		f.Close()
	}
	for fd := 0; fd <= 2; fd++ {
		c := byte('x')
		say(fmt.Sprintf("tiocsti-fd%d", fd), res(errno(ioctlPtr(fd, unix.TIOCSTI, unsafe.Pointer(&c)))))
	}
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		// Field 7, after the parenthesised command, is tty_nr.
		rest := string(b[bytes.LastIndexByte(b, ')')+2:])
		fields := strings.Fields(rest)
		say("tty_nr", fields[4])
		say("sid-is-init-session", strconv.FormatBool(fields[3] == "1"))
	}

	// Descriptors: every one the job got through exec (the Go runtime
	// opens its own close-on-exec, so those without it came from outside),
	// and the caller's stray one.
	ents, _ := os.ReadDir("/proc/self/fd")
	var fds []string
	for _, e := range ents {
		n, _ := strconv.Atoi(e.Name())
		flags, err := unix.FcntlInt(uintptr(n), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		fds = append(fds, e.Name()+"->"+target)
	}
	say("fds", strings.Join(fds, ","))
	if b, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d", escapeFD)); err == nil {
		say("stray-fd-content", strings.TrimSpace(string(b)))
	} else {
		say("stray-fd-content", res(err))
	}

	// rlimits. A Go program raises its own soft RLIMIT_NOFILE at start-up
	// (and restores it for its children): the job's shell reports that one.
	for _, l := range []struct {
		name string
		res  int
	}{{"core", unix.RLIMIT_CORE}, {"fsize", unix.RLIMIT_FSIZE}} {
		var r unix.Rlimit
		if err := unix.Getrlimit(l.res, &r); err != nil {
			say("rlimit-"+l.name, res(err))
			continue
		}
		say("rlimit-"+l.name, fmt.Sprintf("%d/%d", int64(r.Cur), int64(r.Max)))
	}
}

func ioctlPtr(fd int, req uint, p unsafe.Pointer) unix.Errno {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(p))
	return e
}

// escapeRunner is the careless caller: it runs the probe in two steps and
// prints their output with the step's name in front, and its own facts.
func escapeRunner(t *testing.T) {
	dir := os.Getenv(envEscapeDir)
	// Generous limits, as the issue found them.
	for _, r := range []int{unix.RLIMIT_NOFILE, unix.RLIMIT_CORE, unix.RLIMIT_FSIZE} {
		lim := unix.Rlimit{Cur: 20000, Max: 20000}
		if r != unix.RLIMIT_NOFILE {
			lim = unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
		}
		if err := syscall.Setrlimit(r, (*syscall.Rlimit)(&lim)); err != nil {
			t.Fatal(err)
		}
	}
	id, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, true)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("runner session-keyring=%d\n", id)
	target, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", escapeFD))
	fmt.Printf("runner fd%d=%s\n", escapeFD, target)
	var st unix.Stat_t
	if err := unix.Fstat(0, &st); err == nil {
		fmt.Printf("runner stdin-is-tty=%v\n", st.Mode&unix.S_IFMT == unix.S_IFCHR)
	}
	exe, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	b := New(Options{StateDir: filepath.Join(dir, "state"), JailDir: filepath.Join(dir, "jails")})
	for _, step := range []struct {
		name  string
		allow []string
	}{{"default", nil}, {"keyctl", []string{"keyctl"}}} {
		spec := suiteOpts.Spec(t, "escape-"+step.name, runnertest.Sh(`echo "probe rlimit-nofile=$(ulimit -Sn)/$(ulimit -Hn)"; exec `+guest.WorkspaceMount+`/probe -test.run='^TestEscapeHelper$'`))
		spec.Step.Resources.Disk = escapeDisk
		spec.Job.Env = append(spec.Job.Env, envEscapeHelper+"=probe")
		spec.SeccompAllow = step.allow
		if err := os.WriteFile(filepath.Join(spec.Workspace, "probe"), exe, 0o755); err != nil {
			t.Fatal(err)
		}
		res := runnertest.RunStep(t, b, spec)
		fmt.Printf("runner %s-seccomp=%s\n", step.name, res.Seccomp)
		out := runnertest.ReadLog(t, spec, guest.StdoutFile)
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "probe ") {
				fmt.Printf("%s %s\n", step.name, strings.TrimPrefix(l, "probe "))
			}
		}
		if res.Status != vmrunner.StatusSucceeded {
			fmt.Printf("runner %s-failed=%s %s stderr=%q\n", step.name, res.Status, res.Detail, runnertest.ReadLog(t, spec, guest.StderrFile))
		}
	}
}

// escapeFacts is what the runner printed: "runner KEY", "default KEY" and
// "keyctl KEY" to values.
type escapeFacts map[string]string

var escape struct {
	once  sync.Once
	facts escapeFacts
	out   string
	err   error
}

// escapeRun runs the careless caller once for all the tests below.
func escapeRun(t *testing.T) escapeFacts {
	t.Helper()
	testtier.Root(t)
	escape.once.Do(func() { escape.facts, escape.out, escape.err = startEscapeRunner() })
	if escape.err != nil {
		t.Fatalf("escape runner: %v\n%s", escape.err, escape.out)
	}
	return escape.facts
}

func startEscapeRunner() (escapeFacts, string, error) {
	dir, err := os.MkdirTemp("", "asb-escape-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)
	secret := "host-secret-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	stray, err := os.Create(filepath.Join(dir, "stray"))
	if err != nil {
		return nil, "", err
	}
	defer stray.Close()
	if _, err := stray.WriteString(secret + "\n"); err != nil {
		return nil, "", err
	}
	// A pty for the runner's controlling terminal.
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, "", err
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		return nil, "", fmt.Errorf("unlock pty: %w", err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		return nil, "", fmt.Errorf("pty number: %w", err)
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, "", err
	}
	defer pts.Close()
	go func() { // drain whatever reaches the terminal
		buf := make([]byte, 4096)
		for {
			if _, err := ptmx.Read(buf); err != nil {
				return
			}
		}
	}()

	cmd := exec.Command(os.Args[0], "-test.run=^TestEscapeHelper$", "-test.v")
	cmd.Env = append(os.Environ(), envEscapeHelper+"=runner", envEscapeDir+"="+dir)
	var out bytes.Buffer
	cmd.Stdin = pts
	cmd.Stdout = &out
	cmd.Stderr = &out
	// Descriptor 9 in the runner is the stray file, not close-on-exec, the
	// way a shell's 9<file leaves it.
	cmd.ExtraFiles = make([]*os.File, escapeFD-2)
	cmd.ExtraFiles[escapeFD-3] = stray
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = cmd.Run()
	facts := escapeFacts{}
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	for sc.Scan() {
		who, kv, ok := strings.Cut(sc.Text(), " ")
		if !ok || (who != "runner" && who != "default" && who != "keyctl") {
			continue
		}
		if k, v, ok := strings.Cut(kv, "="); ok {
			facts[who+" "+k] = v
		}
	}
	facts["secret"] = secret
	if err != nil {
		return facts, out.String(), err
	}
	if facts["runner stdin-is-tty"] != "true" || facts["default fds"] == "" || facts["keyctl fds"] == "" {
		return facts, out.String(), fmt.Errorf("the runner did not run both probes")
	}
	return facts, out.String(), nil
}

// want checks fact key against want and reports the whole set on failure.
func (f escapeFacts) want(t *testing.T, key, want string) {
	t.Helper()
	if got, ok := f[key]; !ok || got != want {
		t.Errorf("%s = %q, want %q", key, got, want)
	}
}

func TestEscapeNestedUserNamespace(t *testing.T) {
	f := escapeRun(t)
	f.want(t, "default unshare-newuser", "EPERM")
	f.want(t, "default clone-newuser", "EPERM")
}

func TestEscapeKeyrings(t *testing.T) {
	f := escapeRun(t)
	// With the default filter the job reaches no keyring at all...
	f.want(t, "default session-keyring", "EPERM")
	f.want(t, "default add-key-user", "EPERM")
	// ...and with keyctl allowed, its session keyring is not the caller's.
	host, job := f["runner session-keyring"], f["keyctl session-keyring"]
	if _, err := strconv.Atoi(job); err != nil {
		t.Fatalf("job's session keyring with keyctl allowed: %q", job)
	}
	if host == "" || job == host {
		t.Errorf("the job's session keyring %s is the caller's (%s)", job, host)
	}
	f.want(t, "keyctl add-key-user", "EPERM") // add_key is not allowed with keyctl
}

func TestEscapeIOURing(t *testing.T) {
	escapeRun(t).want(t, "default io_uring_setup", "EPERM")
}

func TestEscapePerfEventOpen(t *testing.T) {
	escapeRun(t).want(t, "default perf_event_open", "EPERM")
}

func TestEscapeUserfaultfd(t *testing.T) {
	escapeRun(t).want(t, "default userfaultfd", "EPERM")
}

func TestEscapeCallerTerminal(t *testing.T) {
	f := escapeRun(t)
	f.want(t, "default open-dev-tty", "ENOENT")
	f.want(t, "default tty_nr", "0")
	for fd := 0; fd <= 2; fd++ {
		if got := f[fmt.Sprintf("default tiocsti-fd%d", fd)]; got == "ok" {
			t.Errorf("TIOCSTI on the job's descriptor %d worked", fd)
		}
	}
	if _, ok := f["default tiocsti-dev-tty"]; ok {
		t.Errorf("the job opened /dev/tty; TIOCSTI on it: %s", f["default tiocsti-dev-tty"])
	}
}

func TestEscapeInheritedDescriptor(t *testing.T) {
	f := escapeRun(t)
	if !strings.HasSuffix(f["runner fd9"], "/stray") {
		t.Fatalf("the runner does not hold the stray descriptor 9 (%q)", f["runner fd9"])
	}
	for _, step := range []string{"default", "keyctl"} {
		if strings.Contains(f[step+" stray-fd-content"], f["secret"]) {
			t.Errorf("%s: the job read the caller's descriptor %d", step, escapeFD)
		}
		// Only stdin (/dev/null) and the two output pipes.
		fds := strings.Split(f[step+" fds"], ",")
		if len(fds) != 3 || !strings.HasPrefix(fds[0], "0->/dev/null") || !strings.HasPrefix(fds[1], "1->pipe:") || !strings.HasPrefix(fds[2], "2->pipe:") {
			t.Errorf("%s: the job holds descriptors %q, want only 0, 1 and 2", step, fds)
		}
	}
}

func TestEscapeRlimits(t *testing.T) {
	f := escapeRun(t)
	f.want(t, "default rlimit-nofile", "1024/4096")
	f.want(t, "default rlimit-core", "0/0")
	f.want(t, "default rlimit-fsize", fmt.Sprintf("%d/%d", escapeDisk, escapeDisk))
}

func TestEscapeSeccompRecorded(t *testing.T) {
	f := escapeRun(t)
	def, relaxed := f["runner default-seccomp"], f["runner keyctl-seccomp"]
	if !strings.HasPrefix(def, "sha256:") || !strings.HasPrefix(relaxed, "sha256:") || def == relaxed {
		t.Errorf("step results name filters %q and %q, want two different sha256 digests", def, relaxed)
	}
}

// TestSeccompAllowanceRecorded runs a workflow through the pipeline with a
// policy decision that grants one step perf_event_open: that step's record
// names the relaxed filter, the other step's the default one; and an
// allowance the filter cannot make fails the run before any step.
func TestSeccompAllowanceRecorded(t *testing.T) {
	testtier.Root(t)
	text := `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: seccomp
steps:
  - name: plain
    run: "true"
  - name: perf
    run: "true"
`
	w, err := workflow.Parse("seccomp.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	run := func(allow map[string][]string) (*engine.Result, error) {
		dir := t.TempDir()
		store, err := record.OpenStore(filepath.Join(dir, "state"))
		if err != nil {
			t.Fatal(err)
		}
		return engine.Run(context.Background(), w, engine.Options{
			WorkflowBytes: []byte(text), Isolation: workflow.IsolationNamespace, Jobs: 2,
			Host: engine.Host{Root: true}, Store: store, RunRoot: filepath.Join(dir, "runs"),
			Backends:    map[workflow.Isolation]vmrunner.Backend{workflow.IsolationNamespace: newBackend(t)},
			ToolVersion: "escape-test",
			Policy:      runnertest.Policy(t, map[string]any{"agentsandbox": map[string]any{"seccomp": map[string]any{"allow": allow}}}),
		})
	}
	res, err := run(map[string][]string{"perf": {"perf_event_open"}})
	if err != nil {
		t.Fatal(err)
	}
	def, err := seccomp.Default()
	if err != nil {
		t.Fatal(err)
	}
	relaxed, err := def.Relax([]string{"perf_event_open"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"plain": def.DigestString(), "perf": relaxed.DigestString()}
	for _, s := range res.Record.Steps {
		if s.Seccomp == nil || s.Seccomp.String() != want[s.Name] {
			t.Errorf("step %s records seccomp %v, want %s", s.Name, s.Seccomp, want[s.Name])
		}
	}
	if len(res.Record.Steps) != 2 {
		t.Errorf("record has %d steps", len(res.Record.Steps))
	}
	_, err = run(map[string][]string{"*": {"mount"}})
	if err == nil || !strings.Contains(err.Error(), `agentsandbox.seccomp.allow["*"]`) || !strings.Contains(err.Error(), `"mount" cannot be allowed`) {
		t.Errorf("a run granting mount: %v, want a refusal naming the data key", err)
	}
}
