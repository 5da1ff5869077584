// wait.go holds how the host waits for a batch job's VM (the host's
// deadline, the start bound, the step's status from vmrunner.Classify)
// and stops a VM (power-off, QMP quit, kill).

package vm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/microvm"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/sandbox"
)

// jobTimeoutMS is the job's timeout, the one the agent enforces: the
// job's own, else the step's. The engine's job.json already has it (the
// guest agent reads that file, which no backend rewrites).
func jobTimeoutMS(spec vmrunner.StepSpec) int64 {
	if ms := spec.Job.TimeoutMS; ms != 0 {
		return ms
	}
	return spec.Step.Resources.TimeoutMS
}

// errNotStarted cancels the wait when the start bound passes.
var errNotStarted = errors.New("the job did not start in time")

// wait waits for the hypervisor with the host's deadline and turns what it
// sees into the step's result.
func (b *Backend) wait(ctx context.Context, r *run, ri RunnerInfo, spec vmrunner.StepSpec, con *consoleWatch, res vmrunner.StepResult) (vmrunner.StepResult, error) {
	var timeout time.Duration
	if ms := hostTimeoutMS(spec); ms > 0 {
		timeout = time.Duration(ms)*time.Millisecond + guest.KillGrace + b.opts.BootAllowance
	}
	bound := b.startTimeout(res.Accel)
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		t := time.NewTimer(bound)
		defer t.Stop()
		select {
		case <-con.started:
		case <-wctx.Done():
		case <-t.C:
			cancel(errNotStarted)
		}
	}()
	x, err := r.sb.Wait(wctx, timeout, 100*time.Millisecond, func(graceful bool) { r.shutdown(ri, graceful) })
	res.Usage = x.Usage
	if err != nil {
		if ctx.Err() == nil && errors.Is(context.Cause(wctx), errNotStarted) {
			return res, &StartError{Accel: accelOf(res), What: fmt.Sprintf("the guest did not start it within %v, and the host stopped the VM", bound), ConsoleTail: con.tail()}
		}
		return res, err
	}
	usage, hostTimeout := x.Usage, x.HostTimeout
	panicked, started := con.state()
	result, hasResult, rerr := vmrunner.ReadResult(spec.ControlDir)
	res.Result, res.HasResult = result, hasResult
	if !started && !hasResult && !hostTimeout && usage.OOMKills == 0 {
		return res, &StartError{Accel: accelOf(res), What: fmt.Sprintf("the hypervisor ended (%s) before the guest started it", exitText(x.Err)), ConsoleTail: con.tail()}
	}
	res.Status, res.Detail = vmrunner.Classify(vmrunner.Facts{
		Result: result, HasResult: hasResult, ResultErr: rerr,
		Usage: usage, MemoryLimit: hypervisorMemory(spec.Step.Resources),
		TimeoutMS: jobTimeoutMS(spec), HostTimeout: hostTimeout,
		Panicked: panicked,
		Exit:     x.Err,
		Words:    b.words(spec),
	})
	return res, nil
}

// words name the VM in a step's detail.
func (b *Backend) words(spec vmrunner.StepSpec) vmrunner.Words {
	return vmrunner.Words{
		Killed:   "the hypervisor",
		Stopped:  "the host stopped the VM",
		Deadline: fmt.Sprintf("the guest did not finish within the step's %d ms timeout plus %v for boot", hostTimeoutMS(spec), b.opts.BootAllowance),
		NoResult: func(rerr, exit error) string {
			if errors.Is(rerr, fs.ErrNotExist) {
				return fmt.Sprintf("guest powered off without a result (hypervisor: %v)", exitText(exit))
			}
			return fmt.Sprintf("guest left no readable result: %v", rerr)
		},
	}
}

// hostTimeoutMS is the timeout the host enforces: the step's, else the
// job's. The agent enforces the job's inside the guest.
func hostTimeoutMS(spec vmrunner.StepSpec) int64 {
	if ms := spec.Step.Resources.TimeoutMS; ms > 0 {
		return ms
	}
	return spec.Job.TimeoutMS
}

func exitText(err error) string {
	if err == nil {
		return "exited 0"
	}
	return err.Error()
}

// shutdown stops the VM: politely (microvm-shutdown or QMP powerdown) when
// graceful, then QMP quit, then SIGKILL to the whole cgroup, each stage
// given ShutdownGrace to end the hypervisor (sandbox.Stop).
func (r *run) shutdown(ri RunnerInfo, graceful bool) {
	grace := r.b.opts.ShutdownGrace
	sock := r.qmpSocket()
	var stages []sandbox.Stage
	if graceful {
		powerOff := sandbox.Stage{Grace: grace}
		if ri.HasShutdown {
			powerOff.Ask = func() {
				sctx, cancel := context.WithTimeout(context.Background(), grace)
				defer cancel()
				cmd := exec.CommandContext(sctx, filepath.Join(ri.Dir, "bin", "microvm-shutdown"))
				cmd.Dir = r.workDir
				_ = cmd.Run()
			}
		} else if sock != "" {
			powerOff.Ask = func() { _ = qmp(sock, "system_powerdown", grace) }
		}
		stages = append(stages, powerOff)
	}
	if sock != "" {
		stages = append(stages, sandbox.Stage{Ask: func() { _ = qmp(sock, "quit", grace) }, Grace: grace})
	}
	r.sb.Stop(stages...)
}

// qmpSocket finds the runner's control socket: the socket microvm-run
// creates in the VM's working directory that is not the session channel's
// (microvm.SessionSocket).
func (r *run) qmpSocket() string {
	ents, err := os.ReadDir(r.workDir)
	if err != nil {
		return ""
	}
	var socks []string
	for _, e := range ents {
		if e.Type()&fs.ModeSocket != 0 && e.Name() != microvm.SessionSocket {
			socks = append(socks, filepath.Join(r.workDir, e.Name()))
		}
	}
	sort.Strings(socks)
	if len(socks) == 0 {
		return ""
	}
	return socks[0]
}
