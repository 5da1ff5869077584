package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/vmrunner/jail"
	"github.com/vishvananda/netlink"
)

// The fakes write down what they were asked, one line each, in one log,
// so a test compares the whole story as text.

// guard bounds how long a test waits for the goroutine under test to get
// somewhere; it only matters when the code under test is broken.
const guard = 10 * time.Second

// recorder is the fakes' shared log.
type recorder struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed and replaced on every line
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
	close(r.changed)
	r.changed = make(chan struct{})
}

// text is the log without its usage reads (how many a wait does depends
// on when its ticker fires).
func (r *recorder) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, l := range r.lines {
		if !strings.HasPrefix(l, "read usage") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// waitFor blocks until n lines starting with prefix were written.
func (r *recorder) waitFor(t *testing.T, prefix string, n int) {
	t.Helper()
	timeout := time.After(guard)
	for {
		r.mu.Lock()
		count := 0
		for _, l := range r.lines {
			if strings.HasPrefix(l, prefix) {
				count++
			}
		}
		changed := r.changed
		r.mu.Unlock()
		if count >= n {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("waited %v for %d log lines %q; the log:\n%s", guard, n, prefix, r.text())
		}
	}
}

// fakeHost makes fake parts. Set its fields before Create and Start.
type fakeHost struct {
	log      *recorder
	stateDir string

	netnsErr, cgroupErr, startErr error
	// v1 says the cgroup cannot be opened (cgroup v1): the jail is added
	// to it after its start.
	v1 bool
	// usage is what the cgroup measures.
	usage cgroup.Usage
	// onRelease runs inside the jail's Release; holdRelease keeps Release
	// from returning until the jail exits.
	onRelease   func()
	holdRelease bool

	proc *fakeProc
}

func newFakeHost(stateDir string) *fakeHost {
	return &fakeHost{log: newRecorder(), stateDir: stateDir}
}

// listed says whether a state file in h.stateDir names what is created.
func (h *fakeHost) listed(t func(hoststate.State) []string, name string) bool {
	sts, err := hoststate.Read(h.stateDir)
	if err != nil {
		return false
	}
	for _, st := range sts {
		if slices.Contains(t(st.State), name) {
			return true
		}
	}
	return false
}

func (h *fakeHost) CreateNetns(name string) (Netns, error) {
	listed := h.listed(func(s hoststate.State) []string { return s.Netns }, name)
	h.log.add("create netns %s (in the state file: %v)", name, listed)
	if h.netnsErr != nil {
		return nil, h.netnsErr
	}
	return &fakeNetns{log: h.log, name: name}, nil
}

func (h *fakeHost) NewCgroup(path string, l cgroup.Limits) (Cgroup, error) {
	listed := h.listed(func(s hoststate.State) []string { return s.Cgroups }, path)
	h.log.add("create cgroup %s memory=%d pids=%d (in the state file: %v)", path, l.MemoryBytes, l.PIDs, listed)
	if h.cgroupErr != nil {
		return nil, h.cgroupErr
	}
	return &fakeCgroup{h: h, path: path}, nil
}

func (h *fakeHost) StartJail(cfg jail.Config) (Process, error) {
	h.log.add("start jail root=%s netns=%s cgroupfd=%v", cfg.RootDir, cfg.NetnsPath, cfg.CgroupFD > 0)
	if h.startErr != nil {
		return nil, h.startErr
	}
	h.proc = &fakeProc{h: h, done: make(chan struct{})}
	return h.proc, nil
}

type fakeNetns struct {
	log  *recorder
	name string
}

func (n *fakeNetns) Path() string { return "/run/netns/" + n.name }
func (n *fakeNetns) CreateTap(t netns.Tap) (netlink.Link, error) {
	n.log.add("create tap %s in netns %s owner=%d group=%d", t.Name, n.name, t.Owner, t.Group)
	return nil, nil
}
func (n *fakeNetns) Delete() error {
	n.log.add("delete netns %s", n.name)
	return nil
}

// The lifecycle's tests open no egress room: the backends' tests do.
func (n *fakeNetns) SetupEgress(netns.Egress) error {
	n.log.add("set up egress in netns %s", n.name)
	return nil
}
func (n *fakeNetns) Listen(network, address string) (net.Listener, error) {
	return nil, errors.New("the fake netns has no sockets")
}
func (n *fakeNetns) ListenPacket(network, address string) (net.PacketConn, error) {
	return nil, errors.New("the fake netns has no sockets")
}
func (n *fakeNetns) EgressCounters() (netns.EgressCounters, error) {
	return netns.EgressCounters{}, nil
}
func (n *fakeNetns) SetBandwidth(link string, bitsPerSecond uint64) error {
	n.log.add("shape %s in netns %s to %d bit/s", link, n.name, bitsPerSecond)
	return nil
}

type fakeCgroup struct {
	h    *fakeHost
	path string
}

func (g *fakeCgroup) FD() (*os.File, error) {
	if g.h.v1 {
		g.h.log.add("open cgroup %s: not on cgroup v1", g.path)
		return nil, cgroup.ErrNoFD
	}
	g.h.log.add("open cgroup %s", g.path)
	return os.Open(os.DevNull)
}

func (g *fakeCgroup) Add(pid int) error {
	g.h.log.add("add pid %d to cgroup %s", pid, g.path)
	return nil
}

func (g *fakeCgroup) Usage() (cgroup.Usage, error) {
	g.h.log.add("read usage")
	return g.h.usage, nil
}

// Kill kills the cgroup's processes, the jail's init among them.
func (g *fakeCgroup) Kill() error {
	g.h.log.add("kill cgroup %s", g.path)
	if g.h.proc != nil {
		g.h.proc.exit(errors.New("jail init: signal: killed"))
	}
	return nil
}

func (g *fakeCgroup) Delete() error {
	g.h.log.add("delete cgroup %s", g.path)
	return nil
}

// fakeProc is the jail's init. It runs until a test calls exit or
// something kills it.
type fakeProc struct {
	h    *fakeHost
	once sync.Once
	done chan struct{}
	err  error
}

func (p *fakeProc) Pid() int { return 4242 }

func (p *fakeProc) Release() error {
	p.h.log.add("release jail")
	if p.h.onRelease != nil {
		p.h.onRelease()
	}
	if p.h.holdRelease {
		<-p.done
		return errors.New("jail init exited before its release")
	}
	return nil
}

func (p *fakeProc) Done() <-chan struct{} { return p.done }

func (p *fakeProc) Wait() error {
	<-p.done
	return p.err
}

func (p *fakeProc) Kill() error {
	p.h.log.add("kill jail")
	p.exit(errors.New("jail init: signal: killed"))
	return nil
}

func (p *fakeProc) Close() error {
	p.h.log.add("close jail")
	return nil
}

// exit ends the init with err (nil: exit status 0), once.
func (p *fakeProc) exit(err error) {
	p.once.Do(func() {
		p.err = err
		close(p.done)
	})
}

// fakeClock is advanced by hand. Its timers fire when Advance passes
// them, each at most once per Advance, like time's never blocking.
type fakeClock struct {
	log *recorder

	mu     sync.Mutex
	now    time.Duration // since the test began
	timers []*fakeTimer
}

type fakeTimer struct {
	clk     *fakeClock
	at      time.Duration
	every   time.Duration // 0 for a timer
	c       chan time.Time
	stopped bool
}

// NewTimer and NewTicker write to the log once the timer is set, so a test
// that sees the line can Advance past it.
func (c *fakeClock) NewTimer(d time.Duration) timer {
	t := c.add(d, 0)
	c.log.add("timer %v", d)
	return t
}

func (c *fakeClock) NewTicker(d time.Duration) timer {
	t := c.add(d, d)
	c.log.add("ticker %v", d)
	return t
}

func (c *fakeClock) add(d, every time.Duration) *fakeTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clk: c, at: c.now + d, every: every, c: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock by d and fires what falls due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now += d
	for _, t := range c.timers {
		if t.stopped || t.at > c.now {
			continue
		}
		select {
		case t.c <- time.Unix(0, 0).Add(c.now):
		default:
		}
		if t.every == 0 {
			t.stopped = true
			continue
		}
		for t.at <= c.now {
			t.at += t.every
		}
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	t.stopped = true
}
