package sandbox

import (
	"os"
	"time"

	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
	"github.com/agentsandbox/agentsandbox/vmrunner/jail"
	"github.com/vishvananda/netlink"
)

// The parts a sandbox holds, as small interfaces over what it asks of the
// host. The real ones are *netns.NS, *cgroup.Group and *jail.Process; the
// package's tests use fakes that write down what they were asked, so the
// lifecycle is tested without root and without waiting.

// Netns is the step's network namespace: also the room of its egress
// (vmrunner.NetRoom).
type Netns interface {
	vmrunner.NetRoom
	// Path is the namespace's file, for the jail to join.
	Path() string
	// CreateTap creates a tap device in the namespace (the vm backend's).
	CreateTap(t netns.Tap) (netlink.Link, error)
	// Delete removes the namespace.
	Delete() error
}

// Cgroup is the step's cgroup.
type Cgroup interface {
	// FD opens the cgroup's directory, for the jail to be cloned into it
	// (cgroup v2); it fails where that is not possible (v1).
	FD() (*os.File, error)
	// Add moves a process into the cgroup.
	Add(pid int) error
	// Usage reads what the cgroup measured so far.
	Usage() (cgroup.Usage, error)
	// Kill kills every process in the cgroup.
	Kill() error
	// Delete kills what is left and removes the cgroup.
	Delete() error
}

// Process is the jail's init, started held.
type Process interface {
	Pid() int
	// Release lets the held init go on, once it is in its cgroup.
	Release() error
	// Done is closed when the init has exited.
	Done() <-chan struct{}
	// Wait waits for the init's exit and returns how it ended.
	Wait() error
	// Kill sends SIGKILL to the init (and so to its pid namespace).
	Kill() error
	// Close lets go of an init that was never released.
	Close() error
}

// host makes the parts: osHost on a real host, a fake in the tests.
type host interface {
	CreateNetns(name string) (Netns, error)
	NewCgroup(path string, l cgroup.Limits) (Cgroup, error)
	StartJail(cfg jail.Config) (Process, error)
}

// osHost makes the real parts. It returns a nil interface, never a nil
// pointer in one, with an error.
type osHost struct{}

func (osHost) CreateNetns(name string) (Netns, error) {
	ns, err := netns.Create(name)
	if err != nil {
		return nil, err
	}
	return ns, nil
}

func (osHost) NewCgroup(path string, l cgroup.Limits) (Cgroup, error) {
	g, err := cgroup.New(path, l)
	if err != nil {
		return nil, err
	}
	return g, nil
}

func (osHost) StartJail(cfg jail.Config) (Process, error) {
	p, err := jail.Start(cfg)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// clock makes the timers a sandbox waits on: the host's deadline, the usage
// poll and each stage of a stop. realClock is the time package's; the tests
// advance a fake one by hand.
type clock interface {
	// NewTimer fires once, d from now.
	NewTimer(d time.Duration) timer
	// NewTicker fires every d.
	NewTicker(d time.Duration) timer
}

// timer is a time.Timer or time.Ticker.
type timer interface {
	C() <-chan time.Time
	Stop()
}

type realClock struct{}

func (realClock) NewTimer(d time.Duration) timer {
	t := time.NewTimer(d)
	return realTimer{c: t.C, stop: func() { t.Stop() }}
}

func (realClock) NewTicker(d time.Duration) timer {
	t := time.NewTicker(d)
	return realTimer{c: t.C, stop: t.Stop}
}

type realTimer struct {
	c    <-chan time.Time
	stop func()
}

func (t realTimer) C() <-chan time.Time { return t.c }
func (t realTimer) Stop()               { t.stop() }
