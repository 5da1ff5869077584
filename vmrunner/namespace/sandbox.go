package namespace

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
	"golang.org/x/sys/unix"
)

// OpenTimeout bounds how long Open waits for a session job's agent to
// answer on its session socket.
const OpenTimeout = 10 * time.Second

// StopGrace is how long Stop lets the agent end its commands and write its
// result after SIGTERM before it kills the jail's cgroup.
const StopGrace = guest.KillGrace + 3*time.Second

// Sandbox is a step's open jail (Open). For a batch job its agent runs
// the job and Wait waits for it with the host's deadline; for a session
// job the agent runs commands on request (guest/session.go) until Stop.
// All its methods are safe for concurrent use.
type Sandbox struct {
	spec vmrunner.StepSpec
	j    *launched
	res  vmrunner.StepResult // isolation, start and seccomp digest
	// dir is the control directory the host created and sealed, opened
	// O_PATH: the socket is reached beneath it, never through a path the
	// job could have a say in. It is nil once the session is stopping
	// (and for a batch job); dirMu keeps it open while a dial uses its
	// descriptor number.
	dirMu   sync.RWMutex
	dir     *os.File
	initPID int // the agent, the only process that may answer

	stopOnce sync.Once
	stopErr  error
}

var _ vmrunner.Backend = (*Backend)(nil)

// Open creates the step's sandbox (state file, netns, cgroup, limits,
// seccomp, egress) and starts the jail on the job.json the caller wrote to
// the control directory. A batch job runs at once (Wait). For a session
// job (Session true, no command), Open waits until its agent answers a
// ping on the socket in the control directory; ctx bounds the opening
// only, not the session's life. On an error nothing is left; otherwise
// the caller must call Stop, also after Done is closed.
func (b *Backend) Open(ctx context.Context, spec vmrunner.StepSpec) (_ vmrunner.Sandbox, err error) {
	s := &Sandbox{spec: spec}
	s.res.Isolation, s.res.Started = workflow.IsolationNamespace, time.Now()
	defer func() {
		if err != nil {
			err = s.wrap(err)
		}
	}()
	j, err := b.launch(ctx, spec)
	if err != nil {
		if j != nil {
			err = errors.Join(err, j.cleanup())
		}
		return nil, err
	}
	s.j, s.initPID, s.res.Seccomp = j, j.sb.Proc.Pid(), j.seccomp
	if !spec.Job.Session {
		return s, nil
	}
	fail := func(err error) (vmrunner.Sandbox, error) {
		// Nothing to save: SIGTERM, then kill at once.
		now, cancel := context.WithCancel(context.Background())
		cancel()
		return nil, errors.Join(err, s.teardown(now))
	}
	dir, err := openControlDir(spec.ControlDir)
	if err != nil {
		return fail(err)
	}
	s.dir = dir
	if err := s.waitReady(ctx); err != nil {
		return fail(err)
	}
	return s, nil
}

// wrap names the step and what was done with it in err.
func (s *Sandbox) wrap(err error) error {
	if s.spec.Job.Session {
		return fmt.Errorf("open a session for step %q in a namespace jail: %w", s.spec.Step.Name, err)
	}
	return fmt.Errorf("run step %q in a namespace jail: %w", s.spec.Step.Name, err)
}

// Wait waits for the jail to end. A batch job's is waited for with the
// host's deadline (the step's timeout plus HostGrace), and its result
// classified (vmrunner.Classify); a session's ends at Stop or when its
// agent exits.
func (s *Sandbox) Wait(ctx context.Context) (vmrunner.StepResult, error) {
	if s.spec.Job.Session {
		return vmrunner.WaitSession(ctx, s, s.spec, s.spec.Step.Resources.Memory, jailWords, s.res)
	}
	res, err := wait(ctx, s.j.sb, s.spec, s.res)
	res.Finished = time.Now()
	if err != nil {
		return res, s.wrap(err)
	}
	return res, nil
}

// openControlDir opens the host's control directory, which sandbox.PrepareDirs has
// just made root-owned and 0700, without following a symlink.
func openControlDir(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open control directory %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat control directory %s: %w", path, err)
	}
	if st.Uid != 0 || st.Mode&0o077 != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("control directory %s is owned by uid %d with mode %o: it must be root's and 0700", path, st.Uid, st.Mode&0o777)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// waitReady pings the agent until it answers, the jail ends, ctx is done
// or OpenTimeout passes.
func (s *Sandbox) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(OpenTimeout)
	pause := time.Millisecond
	var last error
	for {
		last = s.ping()
		if last == nil {
			return nil
		}
		select {
		case <-s.Done():
			return fmt.Errorf("the jail ended before its agent answered on the session socket (%v): %s", last, s.agentError())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the agent did not answer on the session socket within %v: %w", OpenTimeout, last)
		}
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// agentError is what the agent's result.json says, if it wrote one.
func (s *Sandbox) agentError() string {
	res, ok, err := vmrunner.ReadResult(s.spec.ControlDir)
	switch {
	case err != nil:
		return "no readable result: " + err.Error()
	case !ok:
		return "no result written; the step's console has the jail's output"
	case res.Error != "":
		return "agent: " + res.Error
	}
	return "the agent stopped without an error"
}

func (s *Sandbox) ping() error {
	c, err := s.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if err := guest.NewSessionEncoder(c).Encode(guest.SessionRequest{Op: guest.OpPing}); err != nil {
		return fmt.Errorf("ping the agent: %w", err)
	}
	var ev guest.SessionEvent
	if err := guest.NewSessionDecoder(c).Decode(&ev); err != nil {
		return fmt.Errorf("ping the agent: %w", err)
	}
	if ev.Type != guest.EventPong {
		return fmt.Errorf("ping the agent: answered %q (%s)", ev.Type, ev.Error)
	}
	return nil
}

// dial connects to the agent's socket beneath the control directory and
// checks that the jail's init, and no other process, listens on it.
func (s *Sandbox) dial() (*net.UnixConn, error) {
	s.dirMu.RLock()
	if s.dir == nil {
		s.dirMu.RUnlock()
		return nil, errors.New("the session is stopped: open a new one")
	}
	path := "/proc/self/fd/" + strconv.Itoa(int(s.dir.Fd())) + "/" + guest.SessionSocket
	c, cred, err := vmrunner.DialPeer(path)
	s.dirMu.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("connect to the session socket in %s: %w", s.spec.ControlDir, err)
	}
	if int(cred.Pid) != s.initPID {
		c.Close()
		return nil, fmt.Errorf("the session socket in %s is served by pid %d, not the jail's agent (pid %d): refusing it", s.spec.ControlDir, cred.Pid, s.initPID)
	}
	return c, nil
}

// Done is closed when the jail has ended, by itself or by Stop.
func (s *Sandbox) Done() <-chan struct{} { return s.j.sb.Proc.Done() }

// Seccomp is the digest of the seccomp filter the sandbox's commands run
// under ("sha256:<hex>"), as StepResult.Seccomp.
func (s *Sandbox) Seccomp() string { return s.j.seccomp }

// Usage is what the sandbox's cgroup has measured so far.
func (s *Sandbox) Usage() (vmrunner.Usage, error) { return s.j.sb.Cgroup.Usage() }

// Stop ends the sandbox: SIGTERM to the agent, which kills its commands
// (a batch job's too) and writes result.json; after StopGrace (or at once
// when ctx is done) the jail's cgroup is killed. Then everything Open
// created is removed: the egress room, the cgroup, the netns, the jail's
// root mount point and the state file. Stop after the jail ended (a batch
// job after Wait) only cleans up; a second Stop returns the first's error.
func (s *Sandbox) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		err := s.teardown(ctx)
		if err != nil {
			if s.spec.Job.Session {
				err = fmt.Errorf("stop the session of step %q: %w", s.spec.Step.Name, err)
			} else {
				err = s.wrap(err)
			}
		}
		s.stopErr = err
	})
	return s.stopErr
}

func (s *Sandbox) teardown(ctx context.Context) error {
	select {
	case <-s.Done():
	default:
		// The init is our unreaped child until Done closes, so its pid
		// cannot have been reused.
		_ = syscall.Kill(s.initPID, syscall.SIGTERM)
		t := time.NewTimer(StopGrace)
		select {
		case <-s.Done():
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	s.dirMu.Lock()
	if s.dir != nil {
		s.dir.Close()
		s.dir = nil
	}
	s.dirMu.Unlock()
	return s.j.cleanup()
}

// Exec starts one command in the session. The request is sent as is (Op
// is set to exec): its Env, UID and GID are the command's own, as in a
// Job, so fill them from the session's Job for the sandbox's defaults. The
// command's events arrive on Events: "started" or "error", then output,
// then "exit". When ctx is done before the exit, the connection is closed
// and the agent kills the command's process group; Close does the same.
// A batch job's sandbox has no session to exec in (vmrunner.ErrBatchExec).
func (s *Sandbox) Exec(ctx context.Context, q guest.SessionRequest) (vmrunner.Exec, error) {
	if !s.spec.Job.Session {
		return nil, fmt.Errorf("exec in step %q: %w", s.spec.Step.Name, vmrunner.ErrBatchExec)
	}
	// StartExec checks the request, for every backend.
	c, err := s.dial()
	if err != nil {
		return nil, fmt.Errorf("exec in session %q: %w", s.spec.Step.Name, err)
	}
	x, err := vmrunner.StartExec(ctx, c, q)
	if err != nil {
		return nil, fmt.Errorf("exec in session %q: %w", s.spec.Step.Name, err)
	}
	return x, nil
}

// Exec is one command running in a session: one connection to the agent's
// socket (vmrunner.ConnExec, which the VM backend's sessions use too).
type Exec = vmrunner.ConnExec
