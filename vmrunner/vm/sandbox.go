// sandbox.go holds the Sandbox a step's Open returns: Open itself (launch,
// then for a session job the session channel), Wait, Exec, Usage, Done,
// and Stop with the teardown on every way out.

package vm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/guest/mux"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// StopGrace is how long Stop lets the agent end its commands, write its
// result and power the VM off after the host's goaway, before it quits
// qemu and then kills the cgroup.
const StopGrace = guest.KillGrace + 10*time.Second

// Sandbox is a step's open VM (Open). For a batch job its agent runs the
// job and Wait waits for it with the host's deadline; for a session job
// the agent serves commands on the session channel (a virtio-serial port;
// docs/guest-protocol.md, "The VM transport") until Stop. All its methods
// are safe for concurrent use.
type Sandbox struct {
	b     *Backend
	spec  vmrunner.StepSpec
	l     *launched
	res   vmrunner.StepResult // the isolation, start, accelerator and seccomp digest
	hvUID int
	mux   *mux.Session // session jobs only

	stopOnce sync.Once
	stopErr  error
}

// Open creates the step's sandbox and starts the VM (state file, netns
// and taps, cgroup, egress, working directory, the runner in its jail) on
// the job.json the caller wrote to the control directory. A batch job
// runs at once (Wait). For a session job (Session true, no command), Open
// connects to the runner's session channel (microvm.SessionSocket in the
// VM's working directory, which qemu listens on) and waits until the
// agent answers a ping, within the start bound of the accelerator. Only
// qemu runners have the channel: cloud-hypervisor and firecracker have no
// virtio-serial. ctx bounds the opening only. On an error nothing is
// left; otherwise the caller must call Stop, also after Done is closed.
func (b *Backend) Open(ctx context.Context, spec vmrunner.StepSpec) (_ vmrunner.Sandbox, err error) {
	s := &Sandbox{b: b, spec: spec, hvUID: HypervisorUID(spec.Job.UID)}
	s.res.Isolation, s.res.Hypervisor = workflow.IsolationVM, workflow.HypervisorQEMU
	s.res.Started = time.Now()
	defer func() {
		if err != nil {
			err = s.wrap(err)
		}
	}()
	if spec.Job.Session {
		if hv := spec.Step.Hypervisor; hv != "" && hv != workflow.HypervisorQEMU {
			return nil, fmt.Errorf("hypervisor %s has no virtio-serial port for the session channel: a VM sandbox needs hypervisor qemu (vsock on the other hypervisors is future work)", hv)
		}
		if err := checkSessionRunner(spec.Runner); err != nil {
			return nil, err
		}
	}
	l, err := b.launch(ctx, spec, &s.res)
	if err != nil {
		if l != nil {
			err = errors.Join(err, l.cleanup())
		}
		return nil, err
	}
	s.l = l
	if !spec.Job.Session {
		return s, nil
	}
	if err := s.connect(ctx, b.startTimeout(s.res.Accel)); err != nil {
		return nil, errors.Join(err, s.teardown(false))
	}
	return s, nil
}

// wrap names the step and what was done with it in err.
func (s *Sandbox) wrap(err error) error {
	if s.spec.Job.Session {
		return fmt.Errorf("open a session for step %q in a VM: %w", s.spec.Step.Name, err)
	}
	return fmt.Errorf("run step %q in a VM: %w", s.spec.Step.Name, err)
}

// Wait waits for the VM to end. A batch job's is waited for with the
// host's deadline and start bound, and its result classified; a
// session's ends at Stop or when the VM powers off.
func (s *Sandbox) Wait(ctx context.Context) (vmrunner.StepResult, error) {
	if s.spec.Job.Session {
		return vmrunner.WaitSession(ctx, s, s.spec, hypervisorMemory(s.spec.Step.Resources), s.b.words(s.spec), s.res)
	}
	res, err := s.b.wait(ctx, s.l.r, s.l.ri, s.spec, s.l.con, s.res)
	res.Finished = time.Now()
	if err != nil {
		return res, s.wrap(err)
	}
	return res, nil
}

// Accel is the accelerator the VM runs with ("kvm" or "tcg").
func (s *Sandbox) Accel() string { return s.res.Accel }

// Seccomp is the digest of the seccomp filter the hypervisor runs under
// ("sha256:<hex>"), as StepResult.Seccomp.
func (s *Sandbox) Seccomp() string { return s.res.Seccomp }

// Done is closed when the VM has ended, by itself or by Stop.
func (s *Sandbox) Done() <-chan struct{} { return s.l.r.sb.Proc.Done() }

// Usage is what the VM's cgroup has measured so far.
func (s *Sandbox) Usage() (vmrunner.Usage, error) { return s.l.r.sb.Cgroup.Usage() }

// Exec starts one command in the session on a stream of its own. The
// request is sent as is (Op is set to exec): its Env, UID and GID are the
// command's own, as in a Job. The command's events arrive on Events:
// "started" or "error", then output, then "exit". When ctx is done before
// the exit, the stream is closed and the agent kills the command's
// process group; Close does the same.
func (s *Sandbox) Exec(ctx context.Context, q guest.SessionRequest) (vmrunner.Exec, error) {
	if !s.spec.Job.Session {
		return nil, fmt.Errorf("exec in step %q: %w", s.spec.Step.Name, vmrunner.ErrBatchExec)
	}
	st, err := s.mux.Open(ctx)
	if err != nil {
		return nil, fmt.Errorf("exec in session %q: open a stream of the session channel: %w", s.spec.Step.Name, err)
	}
	x, err := vmrunner.StartExec(ctx, st, q)
	if err != nil {
		return nil, fmt.Errorf("exec in session %q: %w", s.spec.Step.Name, err)
	}
	return x, nil
}

// Stop ends the sandbox. A session gets a goaway on the channel, on which
// the agent kills its commands, writes result.json and powers the VM off;
// after StopGrace (or at once when ctx is done) qemu is quit over QMP,
// then the cgroup killed; a batch job's VM still running is quit and
// killed. Then everything Open created is removed: the egress, the
// cgroup, the netns with its taps, the working directory with its
// sockets, the jail's root mount point and the state file. Stop after the
// VM ended (a batch job after Wait) only cleans up; a second Stop returns
// the first's error.
func (s *Sandbox) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		if s.mux != nil && ctx.Err() == nil {
			// A guest that stopped reading holds the channel's writes:
			// the goaway waits with the rest of the grace, and the
			// teardown's quit and close unblock it.
			t := time.NewTimer(StopGrace)
			sent := make(chan error, 1)
			go func() { sent <- s.mux.GoAway() }()
			select {
			case err := <-sent:
				if err == nil {
					select {
					case <-s.Done():
					case <-t.C:
					case <-ctx.Done():
					}
				}
			case <-s.Done():
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
		if err := s.teardown(false); err != nil {
			if s.spec.Job.Session {
				s.stopErr = fmt.Errorf("stop the session of step %q: %w", s.spec.Step.Name, err)
			} else {
				s.stopErr = s.wrap(err)
			}
		}
	})
	return s.stopErr
}

// teardown stops the VM (QMP quit, then kill; a powerdown first when
// graceful), closes the channel and cleans everything up.
func (s *Sandbox) teardown(graceful bool) error {
	select {
	case <-s.Done():
	default:
		s.l.r.shutdown(s.l.ri, graceful)
	}
	if s.mux != nil {
		s.mux.Close()
	}
	return s.l.cleanup()
}
