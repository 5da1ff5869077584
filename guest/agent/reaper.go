//go:build linux

package agent

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// exitStatus is what wait4 said about one pid.
type exitStatus struct {
	ws  syscall.WaitStatus
	ru  syscall.Rusage
	err error
}

// reaper waits for the commands the agent starts (startProc), a batch job's
// or a session's. As PID 1 (all) it waits for any child whenever SIGCHLD
// arrives and hands each exit to the command that started that pid; every
// other exit is an orphan's, reaped and dropped.
// Starting a command and registering its pid happen under the lock the
// reaping takes, so no exit can be collected before its pid is known.
// Otherwise it waits for each started pid alone.
type reaper struct {
	all     bool
	mu      sync.Mutex
	waiting map[int]chan exitStatus
}

func newReaper(all bool) *reaper {
	return &reaper{all: all, waiting: map[int]chan exitStatus{}}
}

// start runs fork (which returns the new pid) and returns a channel that
// gets the pid's exit.
func (r *reaper) start(fork func() (int, error)) (int, <-chan exitStatus, error) {
	ch := make(chan exitStatus, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := fork()
	if err != nil {
		return 0, nil, err
	}
	if r.all {
		r.waiting[pid] = ch
		return pid, ch, nil
	}
	go func() {
		var e exitStatus
		for {
			_, e.err = syscall.Wait4(pid, &e.ws, 0, &e.ru)
			if e.err != syscall.EINTR {
				break
			}
		}
		ch <- e
	}()
	return pid, ch, nil
}

// run starts reaping (when it waits for every child) and returns the
// function that stops it, after a last round.
func (r *reaper) run() (stop func()) {
	if !r.all {
		return func() {}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer signal.Stop(sigs)
		for {
			r.reapAll()
			select {
			case <-sigs:
			case <-quit:
				r.reapAll()
				return
			}
		}
	}()
	return func() { close(quit); <-done }
}

// reapAll collects every child that has exited.
func (r *reaper) reapAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var e exitStatus
		pid, err := syscall.Wait4(-1, &e.ws, syscall.WNOHANG, &e.ru)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if !e.ws.Exited() && !e.ws.Signaled() {
			continue // stopped or continued: not an exit
		}
		if ch, ok := r.waiting[pid]; ok {
			delete(r.waiting, pid)
			ch <- e
		}
	}
}
