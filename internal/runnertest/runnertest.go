// Package runnertest is the conformance suite every vmrunner.Backend passes:
// the namespace jail, the VM runner and the fake. Each backend's own test
// calls Run (batch steps) and RunSessions (session jobs' sandboxes,
// sessions.go) with a constructor and the options that say what it
// promises.
//
// The portable part (every backend): hello (an output file lands in the
// workspace, stdout in the logs and on the console), a failing exit code
// propagates, a timeout kills the job quickly, the job's environment is
// exactly the Job's, the workdir is honoured, and a cancelled context stops
// the step. The isolation part (Options.Isolated): the job cannot read or
// forge the control directory, and has no network but lo: it cannot reach a
// listener the test opens on the host's loopback. With network.allow and
// its egress (a gateway whose upstream is internal/testnet's made-up
// internet), the job reaches an allowed name and nothing else, every
// attempt is in the audit log, and the step's namespace is gone after it.
//
// The hostile part (every backend) runs what an attacking job would do
// through the whole host side, engine.Run: outputs declared through
// symlinks to / and /proc, a FIFO output, sparse files that use no disk but
// add up to more than the step's disk, a log flood, and a result.json over its bound. The host must read
// no host file, never hang, and fail the step with a detail that says why
// (or store a symlink output as a symlink).
//
// Jobs use only sh, cat, env, sleep and bash from the host (or from
// Options.PATH), coreutils for the hostile part and busybox (wget,
// timeout) for the egress part, so the suite runs without Nix.
package runnertest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/testnet"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/netns/egress/gateway"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/workflow"
	"github.com/nix-community/go-nix/pkg/nar"
)

// Options say what the backend under test promises.
type Options struct {
	// Isolated backends keep the job away from the control directory and
	// give it no network but lo; the suite then runs the escape tests.
	Isolated bool
	// AsCurrentUser makes jobs run as the test's own uid and gid (a backend
	// without privilege, like the fake); otherwise as guest.DefaultUID/GID.
	AsCurrentUser bool
	// PATH is the jobs' PATH; empty means "/usr/bin:/bin".
	PATH string
	// Isolation is what StepResult.Isolation must say.
	Isolation workflow.Isolation
	// Setup, when set, runs before each subtest (such as testtier.Root).
	Setup func(t *testing.T)
	// EgressSpec, when set, readies the egress case's spec the way the
	// product readies a step with network.allow for this backend, where
	// the suite's spec is not enough: the VM fixture's guest has no NixOS
	// module, so the vm test gives it a runner with the tap and the
	// module's network setup. Isolated backends run the case either way.
	EgressSpec func(t *testing.T, spec *vmrunner.StepSpec)
}

// Run runs the suite; newBackend returns a fresh backend for each subtest.
func Run(t *testing.T, newBackend func(t *testing.T) vmrunner.Backend, opts Options) {
	s := &suite{opts: opts, newBackend: newBackend}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"Hello", s.testHello},
		{"ExitCode", s.testExitCode},
		{"Timeout", s.testTimeout},
		{"EnvExact", s.testEnvExact},
		{"Workdir", s.testWorkdir},
		{"Cancel", s.testCancel},
		{"HostileOutputsAndLogs", s.testHostileOutputsAndLogs},
		{"HostileResult", s.testHostileResult},
	}
	if opts.Isolated {
		tests = append(tests,
			struct {
				name string
				fn   func(t *testing.T)
			}{"ControlDirSealed", s.testControlDirSealed},
			struct {
				name string
				fn   func(t *testing.T)
			}{"NetworkNone", s.testNetworkNone},
			struct {
				name string
				fn   func(t *testing.T)
			}{"Egress", s.testEgress},
		)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if opts.Setup != nil {
				opts.Setup(t)
			}
			tc.fn(t)
		})
	}
}

type suite struct {
	opts       Options
	newBackend func(t *testing.T) vmrunner.Backend
}

// Console collects what a backend sends to StepSpec.Console and says when
// a marker line has appeared.
type Console struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	seen chan struct{}
	mark string
}

// NewConsole returns a console that closes Seen when mark has been written.
func NewConsole(mark string) *Console { return &Console{seen: make(chan struct{}), mark: mark} }

func (c *Console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if c.mark != "" && strings.Contains(c.buf.String(), c.mark) {
		select {
		case <-c.seen:
		default:
			close(c.seen)
		}
	}
	return len(p), nil
}

// Seen is closed once the marker was written.
func (c *Console) Seen() <-chan struct{} { return c.seen }

func (c *Console) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// RunID returns a fresh run id whose first 8 characters are unique.
func RunID(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "t" + hex.EncodeToString(b[:])
}

// Spec returns a step spec for command with fresh workspace and control
// directories and generous limits; tests change what they need.
func (o Options) Spec(t testing.TB, name string, command []string) vmrunner.StepSpec {
	t.Helper()
	path := o.PATH
	if path == "" {
		path = "/usr/bin:/bin"
	}
	uid, gid := guest.DefaultUID, guest.DefaultGID
	if o.AsCurrentUser {
		uid, gid = os.Geteuid(), os.Getegid()
	}
	return vmrunner.StepSpec{
		RunID: RunID(t),
		Step: workflow.Step{
			Name: name,
			Resources: workflow.Resources{
				VCPU: 1, Memory: 256 << 20, PIDs: 64, Disk: 64 << 20, TimeoutMS: 30_000,
			},
			Isolation: o.Isolation,
		},
		Job: guest.Job{
			Version: guest.ProtocolVersion,
			Step:    name,
			Command: command,
			Env:     []string{"PATH=" + path},
			Workdir: guest.WorkspaceMount,
			UID:     uid,
			GID:     gid,
		},
		Workspace:  t.TempDir(),
		ControlDir: t.TempDir(),
	}
}

// Policy is the built-in admission policy, with data (when not nil) merged
// over its own, for tests that run workflows through engine.Run.
func Policy(t testing.TB, data map[string]any) *policy.Engine {
	t.Helper()
	var o policy.Options
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(t.TempDir(), "policy-data.json")
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		o.DataFiles = []string{f}
	}
	e, err := policy.Load(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Sh is a Job command running script with sh -c.
func Sh(script string) []string { return []string{"sh", "-c", script} }

// WriteJob writes spec.Job to the control directory as job.json, as the
// engine does before it hands a step to a backend (which never writes it),
// with the step's timeout when the job has none, as the engine's job has.
// Tests that drive a backend without the engine call it first; RunStep
// does.
func WriteJob(t testing.TB, spec vmrunner.StepSpec) {
	t.Helper()
	j := spec.Job
	if j.TimeoutMS == 0 {
		j.TimeoutMS = spec.Step.Resources.TimeoutMS
	}
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(spec.ControlDir, guest.JobFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// RunStep writes spec's job (WriteJob) and runs spec with a 60 s safety
// deadline, and fails the test on an infrastructure error.
func RunStep(t testing.TB, b vmrunner.Backend, spec vmrunner.StepSpec) vmrunner.StepResult {
	t.Helper()
	WriteJob(t, spec)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := vmrunner.RunStep(ctx, b, spec)
	if err != nil {
		t.Fatalf("Run(%s): %v", spec.Step.Name, err)
	}
	return res
}

// ReadLog returns a log file of the step's control directory.
func ReadLog(t testing.TB, spec vmrunner.StepSpec, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(spec.ControlDir, name))
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return string(b)
}

func (s *suite) testHello(t *testing.T) {
	b := s.newBackend(t)
	spec := s.opts.Spec(t, "hello", Sh("echo hello > out.txt && echo hello-stdout && echo hello-stderr >&2"))
	console := NewConsole("")
	spec.Console = console
	res := RunStep(t, b, spec)
	if res.Status != vmrunner.StatusSucceeded || !res.HasResult || res.Result.ExitCode != 0 {
		t.Fatalf("result %+v, want succeeded with exit 0; console:\n%s", res, console)
	}
	if res.Isolation != s.opts.Isolation {
		t.Errorf("Isolation = %q, want %q", res.Isolation, s.opts.Isolation)
	}
	if res.Started.IsZero() || res.Finished.Before(res.Started) {
		t.Errorf("Started %v Finished %v: want both set, in order", res.Started, res.Finished)
	}
	out, err := os.ReadFile(filepath.Join(spec.Workspace, "out.txt"))
	if err != nil || string(out) != "hello\n" {
		t.Errorf("workspace out.txt = %q, %v; want \"hello\\n\"", out, err)
	}
	if got := ReadLog(t, spec, guest.StdoutFile); got != "hello-stdout\n" {
		t.Errorf("stdout.log = %q", got)
	}
	if got := ReadLog(t, spec, guest.StderrFile); got != "hello-stderr\n" {
		t.Errorf("stderr.log = %q", got)
	}
	if c := console.String(); !strings.Contains(c, "hello-stdout\n") || !strings.Contains(c, "hello-stderr\n") {
		t.Errorf("console = %q, want both lines", c)
	}
}

func (s *suite) testExitCode(t *testing.T) {
	b := s.newBackend(t)
	spec := s.opts.Spec(t, "fails", Sh("echo about to fail; exit 3"))
	res := RunStep(t, b, spec)
	if res.Status != vmrunner.StatusFailed || !res.HasResult || res.Result.ExitCode != 3 {
		t.Fatalf("result %+v, want failed with exit code 3", res)
	}
}

func (s *suite) testTimeout(t *testing.T) {
	b := s.newBackend(t)
	spec := s.opts.Spec(t, "sleeps", Sh("echo sleeping; sleep 60"))
	spec.Step.Resources.TimeoutMS = 1000
	spec.Job.TimeoutMS = 1000
	start := time.Now()
	res := RunStep(t, b, spec)
	took := time.Since(start)
	if res.Status != vmrunner.StatusTimeout {
		t.Fatalf("status %q, want timeout (result %+v)", res.Status, res)
	}
	// The agent's grace (SIGTERM, then SIGKILL) plus a margin that holds
	// a software-emulated guest's boot on a loaded host (15 s were seen at
	// load 10 on two cores): well under the job's 60 s sleep, so the step
	// was ended by its timeout, not by the job.
	if limit := 1*time.Second + guest.KillGrace + 25*time.Second; took > limit {
		t.Fatalf("a 1 s timeout took %v to end the step, want under %v", took, limit)
	}
}

func (s *suite) testEnvExact(t *testing.T) {
	b := s.newBackend(t)
	spec := s.opts.Spec(t, "env", []string{"env"})
	env := append([]string{"A=1", "B=two words", "EMPTY=", "UNICODE=é"}, spec.Job.Env...)
	sort.Strings(env)
	spec.Job.Env = env
	res := RunStep(t, b, spec)
	if res.Status != vmrunner.StatusSucceeded {
		t.Fatalf("result %+v", res)
	}
	var got []string
	sc := bufio.NewScanner(strings.NewReader(ReadLog(t, spec, guest.StdoutFile)))
	for sc.Scan() {
		got = append(got, sc.Text())
	}
	sort.Strings(got)
	if !reflect.DeepEqual(got, env) {
		t.Fatalf("job env = %q\nwant      %q", got, env)
	}
}

func (s *suite) testWorkdir(t *testing.T) {
	b := s.newBackend(t)
	spec := s.opts.Spec(t, "workdir", Sh("cat marker && echo made here > new.txt"))
	sub := filepath.Join(spec.Workspace, "sub", "dir")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "marker"), []byte("in sub/dir\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec.Job.Workdir = guest.WorkspaceMount + "/sub/dir"
	res := RunStep(t, b, spec)
	if res.Status != vmrunner.StatusSucceeded {
		t.Fatalf("result %+v; stderr %q", res, ReadLog(t, spec, guest.StderrFile))
	}
	if got := ReadLog(t, spec, guest.StdoutFile); got != "in sub/dir\n" {
		t.Errorf("stdout = %q, want the marker's content", got)
	}
	if _, err := os.Stat(filepath.Join(sub, "new.txt")); err != nil {
		t.Errorf("file written in the workdir: %v", err)
	}
}

func (s *suite) testCancel(t *testing.T) {
	b := s.newBackend(t)
	spec := s.opts.Spec(t, "cancelled", Sh("echo started-and-waiting; sleep 60"))
	console := NewConsole("started-and-waiting")
	spec.Console = console
	WriteJob(t, spec)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := vmrunner.RunStep(ctx, b, spec)
		errc <- err
	}()
	select {
	case <-console.Seen():
	case err := <-errc:
		t.Fatalf("Run ended before the job started: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not start within 30 s")
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run after cancel: %v, want an error wrapping context.Canceled", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return within 15 s of the cancellation")
	}
}

func (s *suite) testControlDirSealed(t *testing.T) {
	b := s.newBackend(t)
	forged := `{"version":1,"exitCode":0}`
	spec := s.opts.Spec(t, "forger", Sh(fmt.Sprintf(
		`cat %[1]s/job.json && echo READ-JOB; echo '%[2]s' > %[1]s/result.json && echo WROTE-RESULT; `+
			`touch %[1]s/x && echo WROTE-FILE; ls %[1]s && echo LISTED; exit 7`, guest.ControlMount, forged)))
	res := RunStep(t, b, spec)
	out := ReadLog(t, spec, guest.StdoutFile)
	for _, bad := range []string{"READ-JOB", "WROTE-RESULT", "WROTE-FILE", "LISTED"} {
		if strings.Contains(out, bad) {
			t.Errorf("the job could do %s in the control directory; stdout:\n%s", bad, out)
		}
	}
	if res.Status != vmrunner.StatusFailed || res.Result.ExitCode != 7 {
		t.Fatalf("result %+v, want the agent's failed/7, not a forged success", res)
	}
}

func (s *suite) testNetworkNone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	b := s.newBackend(t)
	spec := s.opts.Spec(t, "offline", []string{"bash", "-c", fmt.Sprintf(
		`cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' '; if echo hi > /dev/tcp/127.0.0.1/%d; then echo CONNECTED; fi`, port)})
	res := RunStep(t, b, spec)
	if res.Status != vmrunner.StatusSucceeded {
		t.Fatalf("result %+v; stderr %q", res, ReadLog(t, spec, guest.StderrFile))
	}
	out := ReadLog(t, spec, guest.StdoutFile)
	if strings.Contains(out, "CONNECTED") {
		t.Errorf("the job reached the host's loopback listener on port %d", port)
	}
	if strings.TrimSpace(out) != "lo" {
		t.Errorf("interfaces in the job = %q, want only lo", out)
	}
	select {
	case <-accepted:
		t.Error("the host listener accepted a connection from the job")
	default:
	}
}

// testEgress gives a step network.allow and its gateway, whose upstream is
// testnet's made-up internet, and has the job fetch with busybox wget: the
// allowed name answers through the proxy; a name allowed on another port
// and a name not allowed at all fail. The audit log has the allowed
// connection (its name from the step's resolver, its upstream), the
// refused one with the entry that would allow it, and the queries; the
// step's namespace is gone afterwards.
func (s *suite) testEgress(t *testing.T) {
	testtier.Command(t, "root", "busybox", "apt-get install busybox-static")
	in := testnet.New(t)
	allow := []string{"api.example.test:80", "data.example.test:443"}
	rules, err := egress.NewRules(allow, nil)
	if err != nil {
		t.Fatal(err)
	}
	const bandwidth = 80_000_000 // bits per second
	gw, err := gateway.New(gateway.Config{Step: "egress", Rules: rules, Bandwidth: bandwidth / 8, Resolve: in.Resolve, Dial: in.Dial})
	if err != nil {
		t.Fatal(err)
	}
	// busybox 1.35's wget crashes with -T: timeout bounds it instead.
	spec := s.opts.Spec(t, "egress", Sh(`try() { # name url
  if busybox timeout 30 busybox wget -q -O "$1.out" "$2"; then echo "$1 ok"; else echo "$1 failed"; fi
}
try allowed http://api.example.test/hello
try wrong-port http://data.example.test/x
try not-allowed http://evil.example.test/x
`))
	spec.Step.Network.Allow = allow
	spec.Step.Resources.Bandwidth = bandwidth
	spec.Egress = gw
	if s.opts.EgressSpec != nil {
		s.opts.EgressSpec(t, &spec)
	}
	res := RunStep(t, s.newBackend(t), spec)
	if res.Status != vmrunner.StatusSucceeded {
		t.Fatalf("result %+v; stderr %q", res, ReadLog(t, spec, guest.StderrFile))
	}
	if got, want := ReadLog(t, spec, guest.StdoutFile), "allowed ok\nwrong-port failed\nnot-allowed failed\n"; got != want {
		t.Errorf("the job's fetches:\n%s\nwant:\n%s\nstderr:\n%s", got, want, ReadLog(t, spec, guest.StderrFile))
	}
	if b, err := os.ReadFile(filepath.Join(spec.Workspace, "allowed.out")); err != nil || !strings.Contains(string(b), "testnet GET api.example.test /hello") {
		t.Errorf("the allowed fetch got %q (%v), want testnet's answer", b, err)
	}
	raw := gw.Log()
	lines, err := egress.ReadLog(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var allowed, denied []egress.Conn
	rcodes := map[string]string{} // name → rcode of its A query
	for _, l := range lines {
		switch {
		case l.Conn != nil && l.Conn.Allow && l.Conn.Error == "":
			allowed = append(allowed, *l.Conn)
		case l.Conn != nil:
			denied = append(denied, *l.Conn)
		case l.Query != nil && l.Query.QType == "A":
			rcodes[l.Query.Name] = l.Query.Rcode
		}
	}
	if len(allowed) != 1 || allowed[0].Name != "api.example.test" || allowed[0].NameSource != egress.FromDNS ||
		allowed[0].Rule != "api.example.test:80" || allowed[0].Upstream != "203.0.113.10:80" {
		t.Errorf("allowed connections = %+v\nlog:\n%s", allowed, raw)
	}
	if len(denied) != 1 || denied[0].Hint != "data.example.test:80" {
		t.Errorf("denied connections = %+v, want the one to data.example.test:80 with that hint\nlog:\n%s", denied, raw)
	}
	for name, want := range map[string]string{"api.example.test": "NOERROR", "data.example.test": "NOERROR", "evil.example.test": "NXDOMAIN"} {
		if got := rcodes[name]; got != want {
			t.Errorf("A query for %s: rcode %q, want %q\nlog:\n%s", name, got, want, raw)
		}
	}
	ns := hoststate.NetnsName(spec.RunID, spec.Step.Name)
	if _, err := os.Lstat(filepath.Join(netns.RunDir, ns)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the step's network namespace %s is still there (%v)", ns, err)
	}
}

// hostileYAML is one step per attack. %CANARY% is the host path of a file
// the job must never get the host to read; the job only names it.
const hostileYAML = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: hostile
steps:
  - name: escape
    run: ln -s / host && ln -s /etc/shadow a-link
    outputs: [a-link, host%CANARY%]
    resources: {disk: 64MiB, timeout: 60s}
  - name: procfs
    run: ln -s /proc proc
    outputs: [proc/self/environ]
    resources: {disk: 64MiB, timeout: 60s}
  - name: fifo
    run: mkfifo fifo || echo this sandbox cannot make a FIFO
    outputs: [fifo]
    resources: {disk: 64MiB, timeout: 60s}
  - name: sparse
    run: mkdir sparse && truncate -s 48M sparse/a sparse/b && du -sk sparse
    outputs: [sparse]
    resources: {disk: 64MiB, timeout: 60s}
  - name: flood
    run: yes flood-line | head -c 1048576
    resources: {disk: 64MiB, timeout: 60s}
`

// hostileLogLimit keeps the flood small enough for a serial console.
const hostileLogLimit = 256 << 10

func (s *suite) testHostileOutputsAndLogs(t *testing.T) {
	b := s.newBackend(t)
	dir := t.TempDir()
	canary := "host-canary-" + RunID(t)
	canaryPath := filepath.Join(dir, "canary")
	if err := os.WriteFile(canaryPath, []byte(canary), 0o600); err != nil {
		t.Fatal(err)
	}
	// The host's own environment, which proc/self/environ would show.
	t.Setenv("AGENTSANDBOX_TEST_CANARY", canary)
	text := []byte(strings.ReplaceAll(hostileYAML, "%CANARY%", canaryPath))
	w, err := workflow.Parse("hostile.yaml", text)
	if err != nil {
		t.Fatal(err)
	}
	store, err := record.OpenStore(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	console := map[string]int{}
	opts := engine.Options{
		WorkflowBytes: text, Isolation: s.opts.Isolation, Jobs: 1,
		Host:  engine.Host{Root: os.Geteuid() == 0, UID: os.Geteuid()},
		Store: store, RunRoot: filepath.Join(dir, "runs"),
		Backends: map[workflow.Isolation]vmrunner.Backend{s.opts.Isolation: b},
		// A VM step needs Nix: the backend under test brings its runner.
		Realise: func(context.Context, []workflow.Step) (map[string]engine.Realised, error) {
			return map[string]engine.Realised{}, nil
		},
		Policy:      Policy(t, nil),
		ToolVersion: "runnertest", LogLimit: hostileLogLimit,
		Events: func(e engine.Event) {
			if e.Kind == engine.EventLog {
				mu.Lock()
				console[e.Step] += len(e.Line) + 1
				mu.Unlock()
			}
		},
	}
	type ran struct {
		res *engine.Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := engine.Run(context.Background(), w, opts)
		done <- ran{res, err}
	}()
	var got ran
	select {
	case got = <-done:
	case <-time.After(10 * time.Minute):
		t.Fatal("the host hung on what the hostile jobs left")
	}
	if got.err != nil {
		t.Fatalf("Run: %v", got.err)
	}
	steps := map[string]record.Step{}
	for _, st := range got.res.Record.Steps {
		steps[st.Name] = st
	}
	expectFailed := func(name string, want ...string) {
		t.Helper()
		st := steps[name]
		if st.Status != record.StatusFailed {
			t.Errorf("step %s: %s (%s), want failed", name, st.Status, st.Detail)
		}
		for _, w := range want {
			if !strings.Contains(st.Detail, w) {
				t.Errorf("step %s: detail %q, want it to say %q", name, st.Detail, w)
			}
		}
	}
	expectFailed("escape", "host"+canaryPath, "never through a symlink")
	expectFailed("procfs", "proc/self/environ", "never through a symlink")
	// A VM's 9p share may refuse to make a FIFO; then there is none to read.
	expectFailed("fifo", `output "fifo"`)
	if d := steps["fifo"].Detail; !strings.Contains(d, "a FIFO") && !strings.Contains(d, "was not created") {
		t.Errorf("step fifo: detail %q, want it to say the output is a FIFO", d)
	}
	// Each file is under the step's file size limit (rlimit) and uses no
	// disk; together they are over what the step may output.
	expectFailed("sparse", `output "sparse": file "sparse/b" is 50331648 bytes, which with the 50331648 bytes of outputs before it is over the step's output limit of 67108864 bytes`)

	// The symlink that is itself an output is stored as a symlink; its
	// target is a string the host never resolved.
	if outs := steps["escape"].Outputs; len(outs) != 1 || outs[0].Path != "a-link" {
		t.Errorf("escape outputs %+v, want only a-link", outs)
	} else if typ, target := narRoot(t, store, outs[0].NarHash); typ != nar.TypeSymlink || target != "/etc/shadow" {
		t.Errorf("a-link stored as %v %q, want a symlink to /etc/shadow", typ, target)
	}

	flood := steps["flood"]
	if flood.Status != record.StatusSucceeded {
		t.Errorf("flood: %s (%s), want succeeded", flood.Status, flood.Detail)
	}
	if want := int64(1<<20 - hostileLogLimit); flood.Logs.StdoutTruncated != want {
		t.Errorf("flood: stdoutTruncated = %d, want %d", flood.Logs.StdoutTruncated, want)
	}
	if fi, err := os.Stat(store.BlobPath(flood.Logs.Stdout)); err != nil || fi.Size() > hostileLogLimit+256 {
		t.Errorf("flood: stored stdout is %v bytes (%v), want about %d", fi.Size(), err, hostileLogLimit)
	}
	mu.Lock()
	shown := console["flood"]
	mu.Unlock()
	if shown > hostileLogLimit+64<<10+512 {
		t.Errorf("flood: %d bytes reached the console, want at most about %d", shown, hostileLogLimit)
	}

	// Nothing of the host's was stored, under any name.
	filepath.WalkDir(filepath.Join(store.Dir(), "blobs"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Error(err)
		} else if bytes.Contains(b, []byte(canary)) {
			t.Errorf("blob %s holds the host's canary", p)
		}
		return nil
	})
}

// narRoot returns the type of the root of the stored NAR h and, for a
// symlink, its target.
func narRoot(t *testing.T, store *record.Store, h record.NarHash) (nar.NodeType, string) {
	t.Helper()
	blob, err := store.OpenBlob(h.Blob())
	if err != nil {
		t.Fatal(err)
	}
	defer blob.Close()
	nr, err := nar.NewReader(blob)
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := nr.Next()
	if err != nil {
		t.Fatal(err)
	}
	return hdr.Type, hdr.LinkTarget
}

// testHostileResult: the backend reads result.json as hostile. The job's
// step name, echoed by the agent, makes it far bigger than any result
// should be, as a guest the job took over could: that is no result.
func (s *suite) testHostileResult(t *testing.T) {
	b := s.newBackend(t)
	spec := s.opts.Spec(t, "bigresult", Sh("echo hi"))
	spec.Job.Step = strings.Repeat("s", 128<<10)
	res := RunStep(t, b, spec)
	if res.Status != vmrunner.StatusFailed || res.HasResult {
		t.Fatalf("status %s, result %v, want failed without a result", res.Status, res.HasResult)
	}
	if want := fmt.Sprintf("over the limit of %d bytes", guest.MaxResultSize); !strings.Contains(res.Detail, want) {
		t.Errorf("detail %q, want it to say %q", res.Detail, want)
	}
}

// SessionRequest is an exec request with the session job's user,
// environment and working directory, as a sandbox manager fills it.
func SessionRequest(spec vmrunner.StepSpec, command ...string) guest.SessionRequest {
	return guest.SessionRequest{
		Command: command, Env: spec.Job.Env, Workdir: spec.Job.Workdir,
		UID: spec.Job.UID, GID: spec.Job.GID,
	}
}

// ExecOut is what a session's command printed and how it ended.
type ExecOut struct {
	PID            int
	Stdout, Stderr string
	Exit           *guest.SessionEvent // the exit event; nil without one
	Error          string              // the error event's text
	Err            error               // why the stream ended without either, if it did
}

// Drain reads a session exec's events to the end, in either backend.
func Drain(x vmrunner.Exec) ExecOut {
	var o ExecOut
	for ev := range x.Events() {
		switch ev.Type {
		case guest.EventStarted:
			o.PID = ev.PID
		case guest.EventStdout:
			o.Stdout += string(ev.Data)
		case guest.EventStderr:
			o.Stderr += string(ev.Data)
		case guest.EventExit:
			o.Exit = &ev
		case guest.EventError:
			o.Error = ev.Error
		}
	}
	if e, ok := x.(interface{ Err() error }); ok {
		o.Err = e.Err()
	}
	return o
}
