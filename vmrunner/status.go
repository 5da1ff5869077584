package vmrunner

import (
	"fmt"

	"github.com/agentsandbox/agentsandbox/guest"
)

// Facts are what the host knows about a step once its sandbox has ended.
type Facts struct {
	// Result is the agent's result.json when HasResult; ResultErr says
	// why none could be read otherwise (ReadResult).
	Result    guest.Result
	HasResult bool
	ResultErr error

	// Usage is what the step's cgroup measured; its OOMKills count the
	// processes the kernel killed there for memory. MemoryLimit is that
	// cgroup's memory limit in bytes, for the detail.
	Usage       Usage
	MemoryLimit int64

	// TimeoutMS is the job's timeout, the one the agent enforces.
	TimeoutMS int64
	// HostTimeout says the host's own, later deadline passed and the host
	// stopped the sandbox.
	HostTimeout bool

	// Panicked says the console showed a kernel panic (vm).
	Panicked bool

	// Exit is how the sandbox's own process ended (the jail's init, the
	// hypervisor); nil for exit status 0.
	Exit error

	// Words are how the backend names its sandbox in the detail.
	Words Words
}

// Words are how a backend names its sandbox in a step's detail. The zero
// value speaks of the job itself.
type Words struct {
	// Killed is who an OOM kill hit, as the detail's subject: empty for
	// the job ("killed for memory: …"), "the hypervisor" for a VM ("the
	// hypervisor was killed for memory: …").
	Killed string
	// Stopped says what the host did at its deadline ("the host killed
	// the jail's cgroup").
	Stopped string
	// Deadline says which deadline passed for a sandbox the host stopped
	// without a result; empty says "ran past its TimeoutMS ms timeout".
	Deadline string
	// NoResult says how the sandbox ended without a result, from
	// ResultErr and Exit; nil says "no result: ResultErr".
	NoResult func(resultErr, exit error) string
}

// Classify decides how a step ended, and why, from what the host saw.
// The first rule that holds decides:
//
//  1. The cgroup counted an OOM kill: oom, with or without a result. The
//     step ran out of the memory it was given and lost a process to it;
//     a job that went on and exited 0 did so without that process, so it
//     neither succeeded nor failed on its own terms. The detail names the
//     kills and, when there is one, what the result said.
//  2. There is a result: it decides. It says timedOut (the agent killed
//     the job at its timeout): timeout. The job exited 0, with no signal
//     and no error: succeeded. Otherwise: failed, with its error, signal
//     or exit status. What happened after the agent wrote the result (the
//     host's deadline passing during a slow power-off, a panic on the way
//     down) does not change how the job ended.
//  3. There is none. The host's deadline passed: timeout (the host ended
//     the sandbox). The console showed a kernel panic: failed, "guest
//     panicked". Otherwise: failed, saying how the sandbox ended.
func Classify(f Facts) (Status, string) {
	w := f.Words
	timedOut := fmt.Sprintf("ran past its %d ms timeout", f.TimeoutMS)
	switch {
	case f.Usage.OOMKills > 0:
		d := fmt.Sprintf("killed for memory: %d OOM kill(s) at the %d-byte limit", f.Usage.OOMKills, f.MemoryLimit)
		if w.Killed != "" {
			d = w.Killed + " was " + d
		}
		if f.HasResult {
			d += "; result: " + resultDetail(f.Result, timedOut)
		}
		return StatusOOM, d
	case f.HasResult && f.Result.TimedOut:
		return StatusTimeout, timedOut + stopped(f)
	case f.HasResult && f.Result.Succeeded():
		return StatusSucceeded, ""
	case f.HasResult:
		return StatusFailed, resultDetail(f.Result, timedOut)
	case f.HostTimeout:
		d := w.Deadline
		if d == "" {
			d = timedOut
		}
		return StatusTimeout, d + stopped(f)
	case f.Panicked:
		return StatusFailed, "guest panicked"
	case w.NoResult != nil:
		return StatusFailed, w.NoResult(f.ResultErr, f.Exit)
	default:
		return StatusFailed, fmt.Sprintf("no result: %v", f.ResultErr)
	}
}

// stopped is "; " and Words.Stopped when the host stopped the sandbox.
func stopped(f Facts) string {
	if !f.HostTimeout || f.Words.Stopped == "" {
		return ""
	}
	return "; " + f.Words.Stopped
}

// resultDetail says how a job that left result ended: timedOut when the
// agent timed it out, else its error, the signal that killed it or its
// exit status.
func resultDetail(r guest.Result, timedOut string) string {
	switch {
	case r.TimedOut:
		return timedOut
	case r.Error != "":
		return r.Error
	case r.Signal != "":
		return "killed by " + r.Signal
	default:
		return fmt.Sprintf("exit status %d", r.ExitCode)
	}
}
