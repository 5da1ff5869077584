package jail

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/vmrunner/jail/jailinit"
	"github.com/agentsandbox/agentsandbox/vmrunner/jail/jailwire"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestMain builds the sandbox agent, every jail's init. jailinit.MaybeInit
// lets this test binary play the init too (TestJailInitPath), the way the
// agent does: through the same code, with cgo (stage 2).
func TestMain(m *testing.M) {
	jailinit.MaybeInit()
	os.Exit(testtier.MainWithAgent(m))
}

// fakeFS is a host file system given as a map: "dir", "file", "chardev" or
// "->target".
type fakeFS map[string]string

type fakeInfo struct {
	name string
	mode fs.FileMode
}

func (i fakeInfo) Name() string       { return filepath.Base(i.name) }
func (i fakeInfo) Size() int64        { return 0 }
func (i fakeInfo) Mode() fs.FileMode  { return i.mode }
func (i fakeInfo) ModTime() time.Time { return time.Time{} }
func (i fakeInfo) IsDir() bool        { return i.mode.IsDir() }
func (i fakeInfo) Sys() any           { return nil }

func (f fakeFS) Lstat(name string) (fs.FileInfo, error) {
	v, ok := f[name]
	switch {
	case !ok:
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: fs.ErrNotExist}
	case v == "dir":
		return fakeInfo{name, fs.ModeDir | 0o755}, nil
	case strings.HasPrefix(v, "->"):
		return fakeInfo{name, fs.ModeSymlink | 0o777}, nil
	case v == "chardev":
		return fakeInfo{name, fs.ModeDevice | fs.ModeCharDevice | 0o600}, nil
	}
	return fakeInfo{name, 0o644}, nil
}

func (f fakeFS) Readlink(name string) (string, error) {
	v, ok := f[name]
	if !ok || !strings.HasPrefix(v, "->") {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	return strings.TrimPrefix(v, "->"), nil
}

func renderPlan(p []jailwire.Mount) string {
	var b strings.Builder
	for _, m := range p {
		b.WriteString(m.String() + "\n")
	}
	return b.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

func TestPlanHost(t *testing.T) {
	host := fakeFS{
		"/usr": "dir", "/bin": "->usr/bin", "/sbin": "->usr/sbin", "/lib": "->usr/lib",
		"/lib64": "->/usr/lib64", "/lib32": "->/opt/lib32", "/opt/lib32": "dir",
		"/libx32":          "->/nowhere",
		"/etc/ld.so.cache": "file",
	}
	p, err := Plan(Config{Hostname: "hello", Workspace: "/w", ControlDir: "/c", TmpBytes: 1 << 20}, host)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "plan-host.txt", renderPlan(p))
}

func TestPlanClosure(t *testing.T) {
	env := "/nix/store/aaaa-env"
	host := fakeFS{env + "/bin/sh": "->/nix/store/bbbb-busybox/bin/busybox"}
	p, err := Plan(Config{
		Hostname: "build", Workspace: "/w", ControlDir: "/c",
		ClosurePaths: []string{"/nix/store/bbbb-busybox", env, env},
		EnvPath:      env,
	}, host)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "plan-closure.txt", renderPlan(p))
}

func TestPlanExec(t *testing.T) {
	host := fakeFS{
		"/usr": "dir", "/bin": "->usr/bin", "/lib": "->usr/lib", "/lib64": "->usr/lib64",
		"/etc/ld.so.cache": "file", "/etc/alternatives": "dir",
		"/dev/net/tun": "chardev", "/dev/kvm": "chardev", "/dev/vhost-net": "file",
	}
	p, err := Plan(Config{
		Hostname: "vm", TmpBytes: 1 << 20,
		ClosurePaths: []string{"/nix/store/cccc-microvm-qemu-vm", "/nix/store/bbbb-busybox"},
		Exec: &jailwire.ExecSpec{
			Argv: []string{"/nix/store/cccc-microvm-qemu-vm/bin/microvm-run"}, Dir: "/run/vms/w",
			UID: 65534, GID: 65533,
			Writable: []string{"/run/vms/w", "/srv/ctl", "/srv/ws"},
			ReadOnly: []string{"/opt/runner"},
		},
	}, host)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "plan-exec.txt", renderPlan(p))
}

func TestPlanErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		host fakeFS
		want string
	}{
		{"relative workspace", Config{Workspace: "w", ControlDir: "/c"}, fakeFS{"/usr": "dir"}, "workspace"},
		{"no usr", Config{Workspace: "/w", ControlDir: "/c"}, fakeFS{}, "no /usr directory"},
		{"bad store path", Config{Workspace: "/w", ControlDir: "/c", ClosurePaths: []string{"/nix/store/x/../../etc"}}, fakeFS{}, "not a /nix/store"},
		{"env outside closure", Config{Workspace: "/w", ControlDir: "/c", ClosurePaths: []string{"/nix/store/a-x"}, EnvPath: "/nix/store/b-env"}, fakeFS{}, "not one of the closure"},
		{"env without closure", Config{Workspace: "/w", ControlDir: "/c", EnvPath: "/nix/store/b-env"}, fakeFS{"/usr": "dir"}, "without its closure"},
		{"exec with workspace", Config{Workspace: "/w", Exec: &jailwire.ExecSpec{Argv: []string{"/usr/bin/qemu"}, Dir: "/w", Writable: []string{"/w"}, UID: 1, GID: 1}}, fakeFS{"/usr": "dir"}, "no workspace"},
		{"exec as root", Config{Exec: &jailwire.ExecSpec{Argv: []string{"/usr/bin/qemu"}, Dir: "/w", Writable: []string{"/w"}}}, fakeFS{"/usr": "dir"}, "unprivileged"},
		{"exec relative argv", Config{Exec: &jailwire.ExecSpec{Argv: []string{"qemu"}, Dir: "/w", Writable: []string{"/w"}, UID: 1, GID: 1}}, fakeFS{"/usr": "dir"}, "absolute path"},
		{"exec dir not writable", Config{Exec: &jailwire.ExecSpec{Argv: []string{"/q"}, Dir: "/x", Writable: []string{"/w"}, UID: 1, GID: 1}}, fakeFS{"/usr": "dir"}, "not in a writable bind"},
		{"exec bind over proc", Config{Exec: &jailwire.ExecSpec{Argv: []string{"/q"}, Dir: "/w", Writable: []string{"/w", "/proc/1"}, UID: 1, GID: 1}}, fakeFS{"/usr": "dir"}, "cover the jail's own /proc"},
		{"exec bind over usr", Config{Exec: &jailwire.ExecSpec{Argv: []string{"/q"}, Dir: "/w", Writable: []string{"/w"}, ReadOnly: []string{"/usr"}, UID: 1, GID: 1}}, fakeFS{"/usr": "dir"}, "cover the jail's own /usr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Plan(tc.cfg, tc.host)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Plan: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// jailFixture makes a netns, a workspace, a control dir with job.json and a
// root dir, and removes them at the end.
func jailFixture(t testing.TB, script string) (Config, *bytes.Buffer) {
	t.Helper()
	testtier.Root(t)
	name := hoststate.NetnsName(fmt.Sprintf("jt%d", time.Now().UnixNano()%1e6), t.Name())
	ns, err := netns.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Delete() })
	dir := t.TempDir()
	ws, ctl, root := filepath.Join(dir, "ws"), filepath.Join(dir, "ctl"), filepath.Join(dir, "root")
	for _, d := range []string{ws, ctl, root} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(ws, guest.DefaultUID, guest.DefaultGID); err != nil {
		t.Fatal(err)
	}
	job := guest.Job{
		Version: guest.ProtocolVersion, Step: "t",
		Command: []string{"sh", "-c", script},
		Env:     []string{"PATH=/usr/bin:/bin"},
		Workdir: guest.WorkspaceMount, UID: guest.DefaultUID, GID: guest.DefaultGID,
	}
	b, _ := json.Marshal(job)
	if err := os.WriteFile(filepath.Join(ctl, guest.JobFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	var console bytes.Buffer
	return Config{
		RootDir: root, Hostname: "t", NetnsPath: ns.Path(),
		Workspace: ws, ControlDir: ctl, TmpBytes: 16 << 20, Console: &console,
	}, &console
}

func readResult(t *testing.T, ctl string) guest.Result {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ctl, guest.ResultFile))
	if err != nil {
		t.Fatal(err)
	}
	var r guest.Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func runJail(t *testing.T, cfg Config) {
	t.Helper()
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
}

func TestJailHello(t *testing.T) {
	cfg, console := jailFixture(t, `echo hello > out.txt; echo "on console"; cat /proc/self/status | grep -E '^(Cap|NoNewPrivs|Uid|Seccomp)'; hostname; ls /; ls /dev`)
	runJail(t, cfg)
	r := readResult(t, cfg.ControlDir)
	if !r.Succeeded() {
		t.Fatalf("result %+v; console:\n%s", r, console)
	}
	out, err := os.ReadFile(filepath.Join(cfg.Workspace, "out.txt"))
	if err != nil || string(out) != "hello\n" {
		t.Fatalf("out.txt = %q, %v", out, err)
	}
	c := console.String()
	for _, want := range []string{"on console", "CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t00000000000000e0", "NoNewPrivs:\t1", "Uid:\t65534", "Seccomp:\t2\n"} {
		if !strings.Contains(c, want) {
			t.Errorf("console lacks %q:\n%s", want, c)
		}
	}
	if strings.Contains(c, "\ntty\n") {
		t.Errorf("the jail's /dev has tty:\n%s", c)
	}
	entries, _ := os.ReadDir(cfg.RootDir)
	if len(entries) != 0 {
		t.Errorf("root dir %s not empty on the host: %v", cfg.RootDir, entries)
	}
}

func TestJailSetupErrorReported(t *testing.T) {
	cfg, _ := jailFixture(t, "true")
	cfg.RootDir = filepath.Join(t.TempDir(), "missing")
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = p.Release()
	if err == nil || !strings.Contains(err.Error(), "jail setup: mount root tmpfs on") {
		t.Fatalf("Release: %v, want a jail setup error about the root tmpfs", err)
	}
}

// TestJailRootJobConfined runs the job as uid 0 inside the jail: even then
// the read-only root, the dropped capabilities and the masks hold.
func TestJailRootJobConfined(t *testing.T) {
	cfg, console := jailFixture(t, `
try() { if eval "$1" >/dev/null 2>&1; then echo "ESCAPE: $1"; else echo "held: $1"; fi; }
try 'touch /usr/x'
try 'touch /x'
try 'touch /etc/x'
try 'mount -t tmpfs none /tmp'
try 'test -e /sys/kernel'
try 'test -s /proc/kcore'
try 'echo h > /proc/sysrq-trigger'
try 'echo 1 > /proc/sys/vm/drop_caches'
try 'test -e /run/netns'
try 'cat /root/../etc/shadow'
try 'mknod /tmp/sda b 8 0'
try 'chown 1 /workspace'
echo "hostname=$(cat /proc/sys/kernel/hostname)"
echo "cgroup=$(cat /proc/self/cgroup | cut -d: -f3 | sort -u | tr '\n' ' ')"
grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status
touch /tmp/ok && echo tmp-writable
self=$(readlink /proc/self/ns/net)
for task in /proc/1/task/*; do
	grep -E '^(CapEff|CapBnd|NoNewPrivs)' $task/status | sed 's/^/init-thread /'
	[ "$(readlink $task/ns/net)" = "$self" ] || echo "ESCAPE: init thread $task in netns $(readlink $task/ns/net)"
done
`)
	job := filepath.Join(cfg.ControlDir, guest.JobFile)
	b, _ := os.ReadFile(job)
	var j guest.Job
	json.Unmarshal(b, &j)
	j.UID, j.GID = 0, 0
	b, _ = json.Marshal(j)
	os.WriteFile(job, b, 0o600)
	// Without CAP_DAC_OVERRIDE even uid 0 needs to own its workdir.
	os.Chown(cfg.Workspace, 0, 0)
	runJail(t, cfg)
	out := console.String()
	t.Logf("jail output:\n%s\nresult %+v", out, readResult(t, cfg.ControlDir))
	if strings.Contains(out, "ESCAPE") {
		t.Errorf("a root job got out of the jail's limits:\n%s", out)
	}
	for _, want := range []string{"hostname=t\n", "cgroup=/ \n", "CapEff:\t00000000000000e0", "CapBnd:\t00000000000000e0", "tmp-writable"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	threads := 0
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "init-thread "); ok {
			threads++
			if v != "CapEff:\t00000000000000e0" && v != "CapBnd:\t00000000000000e0" && v != "NoNewPrivs:\t1" {
				t.Errorf("a thread of the jail's init has %q", v)
			}
		}
	}
	if threads < 6 {
		t.Errorf("saw %d lines about the init's threads, want 3 per thread of several threads", threads)
	}
	if n := strings.Count(out, "held: "); n != 12 {
		t.Errorf("%d checks held, want 12", n)
	}
}

func TestRuntimeFiles(t *testing.T) {
	bb := testtier.Command(t, "pure", "busybox", "Debian's busybox-static")
	if files, err := runtimeFiles(bb); err != nil || files != nil {
		t.Errorf("runtimeFiles(static %s) = %v, %v; want nothing", bb, files, err)
	}
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	files, err := runtimeFiles(sh)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 || !strings.Contains(files[0], "ld-linux") {
		t.Fatalf("runtimeFiles(%s) = %v, want its loader then its libraries", sh, files)
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%v", err)
		}
	}
}

// TestJailInitPath starts the jail from a named binary (this test binary by
// its path) instead of /proc/self/exe.
func TestJailInitPath(t *testing.T) {
	cfg, console := jailFixture(t, "echo via-init-path")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg.InitPath = exe
	runJail(t, cfg)
	if r := readResult(t, cfg.ControlDir); !r.Succeeded() || !strings.Contains(console.String(), "via-init-path") {
		t.Fatalf("result %+v, console %q", r, console)
	}
	cfg.InitPath = "relative/init"
	if _, err := Start(cfg); err == nil || !strings.Contains(err.Error(), "not an absolute path") {
		t.Fatalf("Start with a relative init: %v", err)
	}
}

// execFixture is an exec-mode jail running script with /bin/sh as
// 65534:65534 in a working directory it owns.
func execFixture(t testing.TB, script string) (Config, *bytes.Buffer) {
	t.Helper()
	testtier.Root(t)
	name := hoststate.NetnsName(fmt.Sprintf("jx%d", time.Now().UnixNano()%1e6), t.Name())
	ns, err := netns.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Delete() })
	dir := t.TempDir()
	work, root := filepath.Join(dir, "work"), filepath.Join(dir, "root")
	for _, d := range []string{work, root} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(work, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	var console bytes.Buffer
	return Config{
		RootDir: root, Hostname: "x", NetnsPath: ns.Path(), Console: &console,
		Exec: &jailwire.ExecSpec{
			Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin", "A=1"},
			Dir: work, UID: 65534, GID: 65534, Writable: []string{work},
		},
	}, &console
}

func TestJailExec(t *testing.T) {
	cfg, console := execFixture(t, `
grep -E '^(Uid|Gid|Groups|CapEff|CapPrm|CapAmb|NoNewPrivs|Seccomp)' /proc/self/status
test -e /dev/tty && echo ESCAPE-tty
echo "pwd=$(pwd) env=$A pid1=$(cat /proc/1/cmdline | tr '\0' ' ')"
ls -ln /dev/net/tun
echo made > here.txt && echo wrote-workdir
touch /usr/x 2>/dev/null && echo ESCAPE-usr
touch /etc/x 2>/dev/null && echo ESCAPE-etc
test -e /run/netns && echo ESCAPE-run
exec 3<>/dev/net/tun && echo tun-opens
exit 5`)
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	err = p.Wait()
	out := console.String()
	t.Logf("console:\n%s", out)
	if err == nil || !strings.Contains(err.Error(), "exit status 5") {
		t.Errorf("Wait = %v, want the program's exit status 5", err)
	}
	if strings.Contains(out, "ESCAPE") {
		t.Errorf("the program got out of the jail's limits")
	}
	for _, want := range []string{"Uid:\t65534\t65534\t65534\t65534", "Gid:\t65534", "Groups:\t \n", "CapEff:\t0000000000000000",
		"CapPrm:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2\n",
		"pwd=" + cfg.Exec.Dir + " env=1 pid1=agentsandbox-init " + jailwire.InitArg, "crw------- 1 65534 65534 10, 200", "wrote-workdir", "tun-opens"} {
		if !strings.Contains(out, want) {
			t.Errorf("console lacks %q", want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(cfg.Exec.Dir, "here.txt")); err != nil || string(b) != "made\n" {
		t.Errorf("here.txt = %q, %v", b, err)
	}
}

// TestJailExecForwardsSIGTERM: the init passes SIGTERM to the program and
// exits with its status.
func TestJailExecForwardsSIGTERM(t *testing.T) {
	cfg, console := execFixture(t, `trap 'echo got-term; exit 9' TERM; echo waiting > ready; while :; do sleep 0.05; done`)
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(cfg.Exec.Dir, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			p.Kill()
			t.Fatalf("the program did not start; console %q", console)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Kill(p.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = p.Wait()
	if err == nil || !strings.Contains(err.Error(), "exit status 9") || !strings.Contains(console.String(), "got-term") {
		t.Fatalf("Wait = %v, console %q; want the trap's exit status 9", err, console)
	}
}

func TestJailExecStartError(t *testing.T) {
	cfg, _ := execFixture(t, "true")
	cfg.Exec.Argv = []string{"/nonexistent/hypervisor"}
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = p.Release()
	if err == nil || !strings.Contains(err.Error(), "jail setup: start /nonexistent/hypervisor as uid 65534") {
		t.Fatalf("Release: %v, want a setup error naming the program", err)
	}
}

// TestJailUmask: the program's umask is 022 whatever the caller's is, so
// what a job creates does not depend on who ran it.
func TestJailUmask(t *testing.T) {
	cfg, console := execFixture(t, `echo "umask=$(umask)"`)
	old := syscall.Umask(0o077) // the caller's, when the jail starts
	p, err := Start(cfg)
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if out := console.String(); !strings.Contains(out, "umask=0022") {
		t.Errorf("console %q, want umask=0022 under a caller's 0077", out)
	}
}
