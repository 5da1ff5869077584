package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/runnertest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/internal/vmfixture"
	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/nixbuild"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/vmrunner/seccomp"
	"github.com/agentsandbox/agentsandbox/workflow"
)

var shared struct {
	once    sync.Once
	tmp     string
	fx      *vmfixture.Fixture
	err     error
	stateD  string
	workDir string
}

// TestMain builds the sandbox agent, the init of the hypervisor's jail.
// Every backend of the tests keeps its state files and working
// directories in this binary's own directory, never in the host's default
// ones: other packages' tests run at the same time (go test ./...), and
// their live sandboxes' state files are not this package's leftovers.
func TestMain(m *testing.M) {
	tmp, err := os.MkdirTemp("", "asb-vm-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared.tmp = tmp
	shared.stateD = filepath.Join(tmp, "state")
	shared.workDir = filepath.Join(tmp, "vms")
	code := testtier.MainWithAgent(m)
	os.RemoveAll(tmp)
	os.Exit(code)
}

// fixture needs the vm tier (root, qemu, Nix, busybox-static, the Debian
// kernel) and builds the fixture runner with Nix once per test binary.
func fixture(t testing.TB) *vmfixture.Fixture {
	t.Helper()
	testtier.Root(t)
	testtier.Command(t, "vm", "qemu-system-x86_64", "apt-get install qemu-system-x86")
	testtier.Command(t, "vm", "busybox", "apt-get install busybox-static")
	testtier.NixBuild(t)
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if _, err := vmfixture.FindOrFetchKernel(ctx, vmfixture.CacheDir()); err != nil {
			shared.err = err
			return
		}
		init, err := vmfixture.BuildGuestAgent(ctx, shared.tmp)
		if err != nil {
			shared.err = err
			return
		}
		shared.fx, shared.err = vmfixture.BuildNix(ctx, filepath.Join(shared.tmp, "flake"),
			vmfixture.Options{Init: init, HostBinaries: []string{"/usr/bin/bash"}}, nil)
	})
	if errors.Is(shared.err, vmfixture.ErrNoKernel) {
		testtier.Skip(t, "vm", shared.err.Error())
	}
	if shared.err != nil {
		t.Fatalf("build the VM fixture: %v", shared.err)
	}
	return shared.fx
}

func newBackend(t testing.TB, opts Options) *Backend {
	if opts.StateDir == "" {
		opts.StateDir = shared.stateD
	}
	if opts.WorkDir == "" {
		opts.WorkDir = shared.workDir
	}
	if opts.Accel == "" {
		opts.Accel = "tcg"
	}
	return New(opts)
}

// checked runs every step on the fixture runner and then checks that the
// step's netns, cgroup, working directory and state file are gone.
type checked struct {
	t      testing.TB
	b      *Backend
	runner string
}

func (c checked) Isolation() workflow.Isolation { return c.b.Isolation() }

func (c checked) Open(ctx context.Context, spec vmrunner.StepSpec) (vmrunner.Sandbox, error) {
	if spec.Runner == "" {
		spec.Runner = c.runner
	}
	runnertest.WriteJob(c.t, spec) // the engine's part
	sb, err := c.b.Open(ctx, spec)
	if err != nil {
		assertClean(c.t, c.b, spec)
		return nil, err
	}
	return checkedSandbox{sb, c, spec}, nil
}

// checkedSandbox checks that nothing is left once it is stopped.
type checkedSandbox struct {
	vmrunner.Sandbox
	c    checked
	spec vmrunner.StepSpec
}

func (s checkedSandbox) Stop(ctx context.Context) error {
	err := s.Sandbox.Stop(ctx)
	assertClean(s.c.t, s.c.b, s.spec)
	return err
}

func assertClean(t testing.TB, b *Backend, spec vmrunner.StepSpec) {
	t.Helper()
	name := hoststate.NetnsName(spec.RunID, spec.Step.Name)
	if _, err := os.Lstat(filepath.Join(netns.RunDir, name)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("netns %s left behind (%v)", name, err)
	}
	groups, err := cgroup.List(hoststate.CgroupRoot)
	if err != nil {
		t.Errorf("list cgroups: %v", err)
	}
	for _, g := range groups {
		if strings.HasPrefix(g, hoststate.RunCgroup(spec.RunID)+"/") {
			t.Errorf("cgroup %s left behind", g)
		}
	}
	if _, err := os.Lstat(filepath.Join(b.opts.WorkDir, name)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("VM working directory left behind (%v)", err)
	}
	if states, err := hoststate.Read(b.opts.StateDir); err != nil || len(states) > 0 {
		t.Errorf("state files left behind: %v %v", states, err)
	}
}

// fixtureBackend is a checked backend whose steps run the fixture runner.
func fixtureBackend(t *testing.T) vmrunner.Backend {
	return checked{t: t, b: newBackend(t, Options{}), runner: fixture(t).Dir}
}

// TestConformance runs the shared backend suite in real qemu guests (TCG).
func TestConformance(t *testing.T) {
	runnertest.Run(t, fixtureBackend, runnertest.Options{
		Isolated:   true,
		PATH:       "/usr/bin:/bin",
		Isolation:  workflow.IsolationVM,
		Setup:      func(t *testing.T) { fixture(t) },
		EgressSpec: egressSpec,
	})
}

// TestSessionConformance runs the shared session suite in real qemu
// guests (TCG), over the virtio-serial session channel.
func TestSessionConformance(t *testing.T) {
	runnertest.RunSessions(t, fixtureBackend, runnertest.Options{
		Isolated:  true,
		PATH:      "/usr/bin:/bin",
		Isolation: workflow.IsolationVM,
		Setup:     func(t *testing.T) { fixture(t) },
	})
}

func spec(t *testing.T, name string, command []string) vmrunner.StepSpec {
	s := runnertest.Options{Isolation: workflow.IsolationVM}.Spec(t, name, command)
	s.Runner = fixture(t).Dir
	return s
}

func TestHelloRecordsAccelAndConsole(t *testing.T) {
	b := newBackend(t, Options{})
	s := spec(t, "hello", runnertest.Sh("echo hello > out.txt; echo from-the-guest"))
	res := runnertest.RunStep(t, checked{t: t, b: b}, s)
	if res.Status != vmrunner.StatusSucceeded || res.Accel != "tcg" || res.Hypervisor != workflow.HypervisorQEMU {
		t.Fatalf("result %+v, want succeeded under tcg with qemu", res)
	}
	if out, err := os.ReadFile(filepath.Join(s.Workspace, "out.txt")); err != nil || string(out) != "hello\n" {
		t.Errorf("workspace out.txt = %q, %v", out, err)
	}
	con, err := os.ReadFile(filepath.Join(s.ControlDir, ConsoleLog))
	if err != nil || !strings.Contains(string(con), guest.ConsoleStartLine) || !strings.Contains(string(con), "from-the-guest") {
		t.Errorf("console.log = %q, %v; want the start marker and the job's output", con, err)
	}
	if def, err := seccomp.Default(); err != nil || res.Seccomp != def.DigestString() {
		t.Errorf("result seccomp %q, want the default filter's digest the hypervisor ran under (%v)", res.Seccomp, err)
	}
	if res.Usage.CPUTime <= 0 || res.Usage.PeakMemoryBytes <= 0 {
		t.Errorf("usage %+v, want the hypervisor's CPU time and memory", res.Usage)
	}
}

func TestGuestPanicIsFailure(t *testing.T) {
	b := newBackend(t, Options{})
	s := spec(t, "panics", runnertest.Sh("echo c > /proc/sysrq-trigger; sleep 30"))
	s.Job.UID, s.Job.GID = 0, 0
	res := runnertest.RunStep(t, checked{t: t, b: b}, s)
	if res.Status != vmrunner.StatusFailed || res.HasResult || res.Detail != "guest panicked" {
		t.Fatalf("result %+v, want failed without a result, detail \"guest panicked\"", res)
	}
}

func TestHungGuestStoppedByHost(t *testing.T) {
	// The agent's own timeout is far away, so only the host's deadline
	// (step timeout + kill grace + boot allowance) can end this step.
	b := newBackend(t, Options{BootAllowance: 10 * time.Second, ShutdownGrace: time.Second})
	s := spec(t, "hangs", runnertest.Sh("sleep 600"))
	s.Step.Resources.TimeoutMS = 500
	s.Job.TimeoutMS = 600_000
	start := time.Now()
	res := runnertest.RunStep(t, checked{t: t, b: b}, s)
	took := time.Since(start)
	if res.Status != vmrunner.StatusTimeout || res.HasResult || !strings.Contains(res.Detail, "host stopped the VM") {
		t.Fatalf("result %+v, want a host timeout without a result", res)
	}
	if limit := 500*time.Millisecond + guest.KillGrace + 10*time.Second + 3*time.Second + 5*time.Second; took > limit {
		t.Errorf("the host took %v to stop a hung guest, want under %v", took, limit)
	}
}

func TestTapInNetns(t *testing.T) {
	b := newBackend(t, Options{})
	s := spec(t, "tapped", runnertest.Sh("cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' ' | sort"))
	tapRunner(t, &s, vmfixture.Interface{ID: "asbtap0", MAC: "02:00:00:00:00:01"})
	res := runnertest.RunStep(t, checked{t: t, b: b}, s)
	if res.Status != vmrunner.StatusSucceeded {
		t.Fatalf("result %+v; console:\n%s", res, runnertest.ReadLog(t, s, ConsoleLog))
	}
	if got := runnertest.ReadLog(t, s, guest.StdoutFile); got != "eth0\nlo\n" {
		t.Errorf("guest interfaces = %q, want eth0 (the tap's peer) and lo", got)
	}
}

// tapRunner points s at a runner with the fixture's kernel and initramfs
// and the taps ifaces. The runner is a plain directory (bound on its own)
// whose script uses the fixture's kernel and initrd: the jail needs their
// closure, which goes into s.ClosurePaths.
func tapRunner(t *testing.T, s *vmrunner.StepSpec, ifaces ...vmfixture.Interface) {
	t.Helper()
	fx := fixture(t)
	dir := filepath.Join(t.TempDir(), "runner")
	r := fx.Runner
	r.Interfaces = ifaces
	files := r.ShareFiles()
	files["bin/microvm-run"] = r.RunScript("/bin/busybox")
	for n, c := range files {
		mode := os.FileMode(0o644)
		if strings.HasPrefix(n, "bin/") {
			mode = 0o755
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, n)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), mode); err != nil {
			t.Fatal(err)
		}
	}
	s.Runner = dir
	infos, err := nixbuild.Closure(context.Background(), []string{fx.Dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, pi := range infos {
		s.ClosurePaths = append(s.ClosurePaths, pi.Path)
	}
}

// TestProbe runs the real probe. Its payload must reach long mode under
// software emulation (so a "no" under KVM is KVM's, not the payload's);
// without a KVM device the answer is no; and on this host the answer for
// microvm.nix's -cpu host comes within the time limit, whatever it is.
func TestProbe(t *testing.T) {
	testtier.Command(t, "vm", "qemu-system-x86_64", "apt-get install qemu-system-x86")
	ctx := context.Background()
	if a := (Prober{}).ProbeAccel(ctx, "tcg", Target{CPU: "max", Machine: "microvm,acpi=on"}); !a.Usable {
		t.Fatalf("the probe payload does not reach long mode under tcg: %s", a.Full())
	}
	// The same payload with a CPU that has no long mode must fail: the
	// probe really goes that far.
	if a := (Prober{}).ProbeAccel(ctx, "tcg", Target{CPU: "qemu32"}); a.Usable {
		t.Errorf("the probe passed on a 32-bit CPU (%s): it does not test long mode", a.Reason)
	}
	p := Prober{CacheFile: "-", KVMDevice: filepath.Join(t.TempDir(), "no-kvm")}
	if a := p.Probe(ctx, MicrovmNixTarget); a.Usable || !strings.Contains(a.Reason, "cannot open") {
		t.Errorf("probe without a KVM device = %+v", a)
	}
	start := time.Now()
	a := Prober{CacheFile: "-"}.Probe(ctx, MicrovmNixTarget)
	if took := time.Since(start); took > ProbeTimeout+2*time.Second {
		t.Errorf("the probe took %v, want at most about %v", took, ProbeTimeout)
	}
	t.Logf("KVM runs microvm.nix's -cpu host guests here: %v (%s)", a.Usable, a.Full())
}

func TestProbeCache(t *testing.T) {
	id := readBootID()
	if id == "" {
		t.Fatal("no /proc/sys/kernel/random/boot_id: the cache has nothing to key on")
	}
	cache := filepath.Join(t.TempDir(), "probe.json")
	max := Target{CPU: "max"}
	b, _ := json.Marshal(probeCache{Version: probeCacheVersion, BootID: id, Answers: map[string]vmrunner.KVMAnswer{
		MicrovmNixTarget.key(): {Usable: true, Reason: "cached answer"},
	}})
	if err := os.WriteFile(cache, b, 0o644); err != nil {
		t.Fatal(err)
	}
	p := Prober{CacheFile: cache, KVMDevice: "/nonexistent"}
	if a := p.Probe(context.Background(), MicrovmNixTarget); !a.Usable || a.Reason != "cached answer" {
		t.Errorf("probe = %+v; want the cached answer for this boot", a)
	}
	// Another CPU model is probed, not taken from -cpu host's answer, and
	// both answers are kept.
	if a := p.Probe(context.Background(), max); a.Usable || !strings.Contains(a.Reason, "cannot open") {
		t.Errorf("probe for -cpu max = %+v; want a probe of its own", a)
	}
	var c probeCache
	b, _ = os.ReadFile(cache)
	if err := json.Unmarshal(b, &c); err != nil || len(c.Answers) != 2 {
		t.Errorf("cache after two targets: %s (%v)", b, err)
	}
	b, _ = json.Marshal(probeCache{Version: probeCacheVersion, BootID: "another-boot", Answers: map[string]vmrunner.KVMAnswer{
		MicrovmNixTarget.key(): {Usable: true, Reason: "stale"},
	}})
	if err := os.WriteFile(cache, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if a := p.Probe(context.Background(), MicrovmNixTarget); a.Usable || a.Reason == "stale" {
		t.Errorf("probe = %+v; a cache from another boot must be ignored", a)
	}
}

// TestHypervisorJailed looks at the running hypervisor from the host: it
// runs as the job's uid with no capabilities and no_new_privs, in its own
// mount namespace (whose root is the jail's), in the step's netns.
func TestHypervisorJailed(t *testing.T) {
	b := newBackend(t, Options{})
	s := spec(t, "jailed", runnertest.Sh("echo jailed-up; sleep 60"))
	console := runnertest.NewConsole("jailed-up")
	s.Console = console
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := vmrunner.RunStep(ctx, checked{t: t, b: b}, s)
		errc <- err
	}()
	select {
	case <-console.Seen():
	case err := <-errc:
		t.Fatalf("Run ended before the job started: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the job did not start within 60 s")
	}
	pid := findHypervisor(t, hoststate.CgroupPath(s.RunID, s.Step.Name))
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d\n", s.Job.UID, s.Job.UID, s.Job.UID, s.Job.UID),
		fmt.Sprintf("Gid:\t%d\t%d\t%d\t%d\n", HypervisorGID, HypervisorGID, HypervisorGID, HypervisorGID),
		"CapInh:\t0000000000000000\n", "CapPrm:\t0000000000000000\n", "CapEff:\t0000000000000000\n",
		"CapAmb:\t0000000000000000\n", "NoNewPrivs:\t1\n", "Seccomp:\t2\n",
	}
	for _, w := range want {
		if !strings.Contains(string(status), w) {
			t.Errorf("hypervisor %d status lacks %q:\n%s", pid, w, status)
		}
	}
	for _, ns := range []string{"mnt", "pid"} {
		host, _ := os.Readlink("/proc/self/ns/" + ns)
		hv, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
		if err != nil || hv == host {
			t.Errorf("hypervisor %s namespace %q (%v), host's %q: want its own", ns, hv, err, host)
		}
	}
	var stepNet, hvNet syscall.Stat_t
	if err := syscall.Stat(filepath.Join(netns.RunDir, hoststate.NetnsName(s.RunID, s.Step.Name)), &stepNet); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &hvNet); err != nil {
		t.Fatal(err)
	}
	if stepNet.Ino != hvNet.Ino {
		t.Errorf("the hypervisor is not in the step's netns")
	}
	// Its root is the jail's: the generated /etc, no host /root or /sys.
	if h, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/etc/hostname", pid)); err != nil || string(h) != "jailed\n" {
		t.Errorf("hypervisor's /etc/hostname = %q, %v; want the jail's", h, err)
	}
	for _, p := range []string{"root/sys/kernel", "root/run/netns"} {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/%s", pid, p)); err == nil {
			t.Errorf("the hypervisor's root has /%s", strings.TrimPrefix(p, "root/"))
		}
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the cancel")
	}
}

// findHypervisor is the qemu process in the step's cgroup.
func findHypervisor(t *testing.T, cg string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		cgs, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if strings.HasPrefix(string(comm), "qemu-system") && strings.Contains(string(cgs), cg+"\n") {
			return pid
		}
	}
	t.Fatalf("no qemu process in cgroup %s", cg)
	return 0
}

// fakeRunner writes a qemu runner directory whose microvm-run is script
// (run by the host's /bin/sh inside the hypervisor's jail).
func fakeRunner(t *testing.T, script string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "runner")
	files := map[string]string{
		"bin/microvm-run":          "#!/bin/sh\n# accel: ${ACCEL:-tcg}\n" + script,
		"share/microvm/hypervisor": "qemu\n",
	}
	for n, c := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, n)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestHypervisorDiesBeforeStart is the nested-KVM host: qemu aborts at
// once with -cpu host. The step must end at once with an error that names
// KVM, says how to force software emulation and shows the console.
func TestHypervisorDiesBeforeStart(t *testing.T) {
	testtier.Root(t)
	b := newBackend(t, Options{Accel: "kvm", StartTimeout: time.Minute})
	s := runnertest.Options{Isolation: workflow.IsolationVM}.Spec(t, "dies", runnertest.Sh("true"))
	s.Runner = fakeRunner(t, "echo 'qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69' >&2\nexit 134\n")
	start := time.Now()
	res, err := vmrunner.RunStep(context.Background(), checked{t: t, b: b}, s)
	var se *StartError
	if !errors.As(err, &se) {
		t.Fatalf("Run = %+v, %v; want a StartError", res, err)
	}
	for _, want := range []string{"exit status 134", "before the guest started", "KVM", "--accel tcg", "failed to set MSR 0x10a"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("a dead hypervisor took %v to report", took)
	}
}

// TestGuestThatNeverStartsIsStopped: a guest that hangs before its job
// (other CPU models on nested KVM hang after the boot loader) is stopped
// at the start bound, not at the step's timeout, with the console's tail.
func TestGuestThatNeverStartsIsStopped(t *testing.T) {
	testtier.Root(t)
	b := newBackend(t, Options{Accel: "kvm", StartTimeout: 2 * time.Second, ShutdownGrace: 500 * time.Millisecond})
	s := runnertest.Options{Isolation: workflow.IsolationVM}.Spec(t, "hangs", runnertest.Sh("true"))
	s.Step.Resources.TimeoutMS = 10 * 60 * 1000
	s.Runner = fakeRunner(t, "echo 'Booting the kernel.'\nexec sleep 600\n")
	start := time.Now()
	_, err := vmrunner.RunStep(context.Background(), checked{t: t, b: b}, s)
	var se *StartError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "did not start it within 2s") || !strings.Contains(err.Error(), "Booting the kernel.") {
		t.Fatalf("Run error = %v; want a StartError after 2s with the console", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("a guest that never started took %v to stop, want about the 2 s bound", took)
	}
}
