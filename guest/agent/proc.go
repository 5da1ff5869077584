//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentsandbox/agentsandbox/guest"
)

// After a command ended, its output is read on while it still comes: until
// the pipes reach their end, or no byte arrived for drainIdle, or drainMax
// passed. Its process group is killed then, so only a process that left the
// group (setsid) can still hold the pipes open, and the end must not wait
// for it; but what the command itself wrote before it ended is still in
// the pipes, and on a slow guest (a VM under TCG) reading it out can take
// longer than any fixed bound: so the bound is on silence, not on time.
const (
	drainIdle = 500 * time.Millisecond
	drainMax  = 5 * time.Second
)

// procIO says where a command's streams come from and go to.
type procIO struct {
	// Stdin makes the command's stdin a pipe whose write end is
	// proc.stdin; otherwise the command reads /dev/null.
	Stdin bool
	// PTY runs the command on a new pty of this size (openPTY) as its
	// controlling terminal, in a session of its own: proc.stdin writes
	// to the terminal, Stdout reads all it shows, and Stderr reads a
	// pipe that stays empty. Stdin is implied.
	PTY *guest.PTYSize
	// Stdout and Stderr each read one stream until it ends (end of file,
	// or the read end closed once drain gives up), in a
	// goroutine of their own. Their error (a log that could not be
	// written) is the end's OutputErr.
	Stdout, Stderr func(r io.Reader) error
}

// proc is one command the agent runs: a batch job (runJob) or a session's
// exec (server.exec). Both start, time out, stop, drain and reap through
// it, under one rule: the command leads its own process group, and when
// its main process ends, whatever is left in that group is killed.
type proc struct {
	job     guest.Job
	pid     int
	stdin   *os.File // the write end of stdin, when procIO.Stdin
	pty     *os.File // the pty's master, when procIO.PTY
	started time.Time
	exited  <-chan exitStatus
	over    atomic.Bool // the pid is reaped: it may be reused, signals stop

	outR, errR *os.File
	sinks      [2]func(io.Reader) error // started by wait
	copiers    sync.WaitGroup
	outErrs    [2]error
	lastRead   atomic.Int64 // when output last arrived, in UnixNano
}

// readNoting is a pipe's read end that notes when bytes last came.
type readNoting struct {
	r    io.Reader
	last *atomic.Int64
}

func (n readNoting) Read(b []byte) (int, error) {
	k, err := n.r.Read(b)
	if k > 0 {
		n.last.Store(time.Now().UnixNano())
	}
	return k, err
}

// procEnd is how a command ended, in the terms of a Result and of a
// session's exit event.
type procEnd struct {
	Started, Finished time.Time
	ExitCode          int    // -1 when a signal killed it
	Signal            string // such as "SIGKILL"
	TimedOut          bool
	Rusage            guest.Rusage
	// Stopped is the context's error when the context ended the command.
	Stopped error
	// WaitErr is why the command's status could not be had; the fields
	// above but Started and Finished are then unset.
	WaitErr error
	// OutputErr is the Stdout and Stderr readers' errors, in that order.
	OutputErr [2]error
}

// startProc starts job (which must be valid) through the reaper r, with
// its streams wired as pio says; its output is read once wait is called,
// which the caller must do. The job runs in a new process group and,
// when the agent is root, as job.UID:job.GID with no supplementary groups
// (sysProcAttr). On an error nothing runs and nothing stays open.
func startProc(r *reaper, job guest.Job, pio procIO) (_ *proc, err error) {
	argv0, err := lookPath(job.Command[0], job.Env)
	if err != nil {
		return nil, err
	}
	attr, err := sysProcAttr(job)
	if err != nil {
		return nil, err
	}
	p := &proc{job: job}
	var childEnds []*os.File // closed here once the child has them
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
		if err != nil {
			for _, f := range []*os.File{p.stdin, p.outR, p.errR} {
				if f != nil {
					f.Close()
				}
			}
		}
	}()
	var stdinR, outW, errW *os.File
	if pio.PTY != nil {
		var slave *os.File
		if p.pty, slave, err = openPTY(*pio.PTY); err != nil {
			return nil, err
		}
		childEnds = append(childEnds, slave)
		if p.stdin, err = dupFile(p.pty); err != nil {
			p.pty.Close()
			return nil, err
		}
		p.outR, stdinR, outW = p.pty, slave, slave
		// A session of its own, whose controlling terminal is the
		// slave (fd 0 in the child): its process group is its pid, as
		// Setpgid's would be.
		attr.Setpgid, attr.Setsid, attr.Setctty, attr.Ctty = false, true, true, 0
	} else if pio.Stdin {
		if stdinR, p.stdin, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("create stdin pipe: %w", err)
		}
	} else if stdinR, err = os.Open(os.DevNull); err != nil {
		return nil, fmt.Errorf("open %s for stdin: %w", os.DevNull, err)
	}
	if pio.PTY == nil {
		childEnds = append(childEnds, stdinR)
		if p.outR, outW, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("create stdout pipe: %w", err)
		}
		childEnds = append(childEnds, outW)
	}
	if p.errR, errW, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("create stderr pipe: %w", err)
	}
	childEnds = append(childEnds, errW)
	errOfChild := errW.Fd()
	if pio.PTY != nil {
		errOfChild = outW.Fd() // the terminal; the pipe is left empty
	}

	p.started = time.Now().UTC()
	p.pid, p.exited, err = r.start(func() (int, error) {
		return syscall.ForkExec(argv0, job.Command, &syscall.ProcAttr{
			Dir:   job.Workdir,
			Env:   append([]string{}, job.Env...),
			Files: []uintptr{stdinR.Fd(), outW.Fd(), errOfChild},
			Sys:   attr,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("start %s in %s as %d:%d: %w", argv0, job.Workdir, job.UID, job.GID, err)
	}
	p.sinks = [2]func(io.Reader) error{pio.Stdout, pio.Stderr}
	return p, nil
}

// dupFile is a second descriptor of f, closed on exec.
func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup %s: %w", f.Name(), err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// resize sets the size of the command's pty.
func (p *proc) resize(size guest.PTYSize) error {
	if p.pty == nil {
		return errors.New("the command has no pty to resize")
	}
	return setPTYSize(p.pty, size)
}

// signal sends sig to the command's process group, until its main process
// is reaped (then its pid may name another process).
func (p *proc) signal(sig syscall.Signal) {
	if !p.over.Load() {
		_ = syscall.Kill(-p.pid, sig)
	}
}

// killGroup sends SIGKILL to the command's process group.
func (p *proc) killGroup() { _ = syscall.Kill(-p.pid, syscall.SIGKILL) }

// terminate sends SIGTERM to the command's process group and returns the
// channel that says when to escalate to SIGKILL.
func (p *proc) terminate() <-chan time.Time {
	_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	return time.After(guest.KillGrace)
}

// drain waits until drained closes, or the output was silent for drainIdle
// (a process outside the group holds the pipes and writes nothing), or
// drainMax passed since the end (it keeps writing).
func (p *proc) drain(drained <-chan struct{}, ended time.Time) {
	tick := time.NewTicker(drainIdle / 5)
	defer tick.Stop()
	p.lastRead.CompareAndSwap(0, ended.UnixNano())
	for {
		select {
		case <-drained:
			return
		case now := <-tick.C:
			last := time.Unix(0, p.lastRead.Load())
			if last.Before(ended) {
				last = ended
			}
			if now.Sub(last) >= drainIdle || now.Sub(ended) >= drainMax {
				return
			}
		}
	}
}

// wait runs the command to its end. At job.TimeoutMS (when positive), and
// when ctx is done, its process group gets SIGTERM, then SIGKILL
// guest.KillGrace later; when abort closes (the host went away), SIGKILL at
// once. Once its main process has exited, the rest of its group is killed,
// its output is read on while it comes (drain) and the pipes are closed.
func (p *proc) wait(ctx context.Context, abort <-chan struct{}) procEnd {
	end := procEnd{Started: p.started, ExitCode: -1}
	// The output is read from here on, so that a session's "started"
	// event, sent before wait, comes before any of it.
	p.copiers.Add(2)
	for i, r := range []*os.File{p.outR, p.errR} {
		go func() {
			defer p.copiers.Done()
			p.outErrs[i] = p.sinks[i](readNoting{r: r, last: &p.lastRead})
		}()
	}
	var timeout <-chan time.Time
	if p.job.TimeoutMS > 0 {
		t := time.NewTimer(time.Duration(p.job.TimeoutMS) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	stop := ctx.Done()
	var kill <-chan time.Time
	var e exitStatus
wait:
	for {
		select {
		case e = <-p.exited:
			p.over.Store(true)
			break wait
		case <-timeout:
			timeout = nil
			end.TimedOut = true
			if kill == nil {
				kill = p.terminate()
			}
		case <-stop:
			stop = nil
			end.Stopped = ctx.Err()
			if kill == nil {
				kill = p.terminate()
			}
		case <-kill:
			kill = nil
			p.killGroup()
		case <-abort:
			abort = nil
			p.killGroup()
		}
	}
	end.Finished = time.Now().UTC()
	// Nothing the command left in its group outlives it.
	p.killGroup()

	drained := make(chan struct{})
	go func() { p.copiers.Wait(); close(drained) }()
	p.drain(drained, end.Finished)
	p.outR.Close()
	p.errR.Close()
	<-drained
	end.OutputErr = p.outErrs

	if e.err != nil {
		end.WaitErr = e.err
		return end
	}
	end.Rusage = guest.Rusage{
		UserMS:    e.ru.Utime.Sec*1000 + int64(e.ru.Utime.Usec)/1000,
		SystemMS:  e.ru.Stime.Sec*1000 + int64(e.ru.Stime.Usec)/1000,
		MaxRSSKiB: e.ru.Maxrss, // Linux reports ru_maxrss in KiB
	}
	switch {
	case e.ws.Exited():
		end.ExitCode = e.ws.ExitStatus()
	case e.ws.Signaled():
		end.Signal = SignalName(e.ws.Signal())
	}
	return end
}
