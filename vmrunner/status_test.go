package vmrunner

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/agentsandbox/agentsandbox/guest"
)

// The words of the two backends, as they set them.
var (
	jailWords = Words{
		Stopped: "the host killed the jail's cgroup",
		NoResult: func(rerr, exit error) string {
			return fmt.Sprintf("the jail ended without a result (%v; %v)", rerr, exit)
		},
	}
	vmWords = Words{
		Killed:   "the hypervisor",
		Stopped:  "the host stopped the VM",
		Deadline: "the guest did not finish within the step's 500 ms timeout plus 1m0s for boot",
		NoResult: func(rerr, exit error) string {
			if errors.Is(rerr, fs.ErrNotExist) {
				return fmt.Sprintf("guest powered off without a result (hypervisor: %v)", exit)
			}
			return fmt.Sprintf("guest left no readable result: %v", rerr)
		},
	}
)

func TestClassify(t *testing.T) {
	var (
		ok       = guest.Result{ExitCode: 0}
		exit3    = guest.Result{ExitCode: 3}
		signaled = guest.Result{ExitCode: -1, Signal: "SIGKILL"}
		errored  = guest.Result{ExitCode: 127, Error: "exec: \"nope\": not found"}
		timedOut = guest.Result{ExitCode: -1, Signal: "SIGTERM", TimedOut: true}
		oom      = Usage{OOMKills: 2}
		missing  = fmt.Errorf("read result: %w", fs.ErrNotExist)
		tooBig   = errors.New("read result: result.json: over the limit of 65536 bytes")
		killed   = errors.New("signal: killed")
	)
	for _, tc := range []struct {
		name   string
		f      Facts
		status Status
		detail string
	}{
		// 1. An OOM kill decides, with or without a result, whatever the
		// result, the deadline or the console say.
		{"oom without a result (jail)",
			Facts{Usage: oom, MemoryLimit: 64 << 20, ResultErr: missing, Exit: killed, Words: jailWords},
			StatusOOM, "killed for memory: 2 OOM kill(s) at the 67108864-byte limit"},
		{"oom without a result (vm)",
			Facts{Usage: oom, MemoryLimit: 1 << 30, ResultErr: missing, Exit: killed, Words: vmWords},
			StatusOOM, "the hypervisor was killed for memory: 2 OOM kill(s) at the 1073741824-byte limit"},
		{"oom, then the job exited 0",
			Facts{Usage: oom, MemoryLimit: 64 << 20, Result: ok, HasResult: true, Words: jailWords},
			StatusOOM, "killed for memory: 2 OOM kill(s) at the 67108864-byte limit; result: exit status 0"},
		{"oom, then the job exited 0 (vm)",
			Facts{Usage: oom, MemoryLimit: 1 << 30, Result: ok, HasResult: true, Words: vmWords},
			StatusOOM, "the hypervisor was killed for memory: 2 OOM kill(s) at the 1073741824-byte limit; result: exit status 0"},
		{"oom, then the job failed",
			Facts{Usage: oom, MemoryLimit: 64 << 20, Result: signaled, HasResult: true, Words: jailWords},
			StatusOOM, "killed for memory: 2 OOM kill(s) at the 67108864-byte limit; result: killed by SIGKILL"},
		{"oom, then the agent timed the job out",
			Facts{Usage: oom, MemoryLimit: 64 << 20, Result: timedOut, HasResult: true, TimeoutMS: 500, HostTimeout: true, Words: jailWords},
			StatusOOM, "killed for memory: 2 OOM kill(s) at the 67108864-byte limit; result: ran past its 500 ms timeout"},
		{"oom and the host's deadline",
			Facts{Usage: oom, MemoryLimit: 64 << 20, HostTimeout: true, ResultErr: missing, Words: vmWords},
			StatusOOM, "the hypervisor was killed for memory: 2 OOM kill(s) at the 67108864-byte limit"},

		// 2. A result decides.
		{"succeeded",
			Facts{Result: ok, HasResult: true, Words: jailWords},
			StatusSucceeded, ""},
		{"exit status",
			Facts{Result: exit3, HasResult: true, Words: vmWords},
			StatusFailed, "exit status 3"},
		{"killed by a signal",
			Facts{Result: signaled, HasResult: true, Words: jailWords},
			StatusFailed, "killed by SIGKILL"},
		{"the agent's error",
			Facts{Result: errored, HasResult: true, Words: jailWords},
			StatusFailed, `exec: "nope": not found`},
		{"the agent timed the job out",
			Facts{Result: timedOut, HasResult: true, TimeoutMS: 500, Words: vmWords},
			StatusTimeout, "ran past its 500 ms timeout"},
		{"the agent timed the job out, then the host stopped the jail",
			Facts{Result: timedOut, HasResult: true, TimeoutMS: 500, HostTimeout: true, Words: jailWords},
			StatusTimeout, "ran past its 500 ms timeout; the host killed the jail's cgroup"},
		{"a result in time, then the host's deadline during power-off",
			Facts{Result: ok, HasResult: true, TimeoutMS: 500, HostTimeout: true, Words: vmWords},
			StatusSucceeded, ""},
		{"a failing result, then the host's deadline",
			Facts{Result: exit3, HasResult: true, TimeoutMS: 500, HostTimeout: true, Words: jailWords},
			StatusFailed, "exit status 3"},
		{"a result, then a panic on the way down",
			Facts{Result: ok, HasResult: true, Panicked: true, Words: vmWords},
			StatusSucceeded, ""},

		// 3. No result.
		{"host deadline without a result (jail)",
			Facts{HostTimeout: true, TimeoutMS: 500, ResultErr: missing, Exit: killed, Words: jailWords},
			StatusTimeout, "ran past its 500 ms timeout; the host killed the jail's cgroup"},
		{"host deadline without a result (vm)",
			Facts{HostTimeout: true, TimeoutMS: 600_000, ResultErr: missing, Exit: killed, Words: vmWords},
			StatusTimeout, "the guest did not finish within the step's 500 ms timeout plus 1m0s for boot; the host stopped the VM"},
		{"host deadline and a panic: the host ended it",
			Facts{HostTimeout: true, Panicked: true, ResultErr: missing, Words: vmWords},
			StatusTimeout, "the guest did not finish within the step's 500 ms timeout plus 1m0s for boot; the host stopped the VM"},
		{"panic",
			Facts{Panicked: true, ResultErr: missing, Words: vmWords},
			StatusFailed, "guest panicked"},
		{"powered off without a result",
			Facts{ResultErr: missing, Words: vmWords},
			StatusFailed, "guest powered off without a result (hypervisor: <nil>)"},
		{"an unreadable result (vm)",
			Facts{ResultErr: tooBig, Exit: nil, Words: vmWords},
			StatusFailed, "guest left no readable result: read result: result.json: over the limit of 65536 bytes"},
		{"an unreadable result (jail)",
			Facts{ResultErr: tooBig, Words: jailWords},
			StatusFailed, "the jail ended without a result (read result: result.json: over the limit of 65536 bytes; <nil>)"},
		{"the jail's init killed",
			Facts{ResultErr: missing, Exit: killed, Words: jailWords},
			StatusFailed, "the jail ended without a result (read result: file does not exist; signal: killed)"},
		{"no words",
			Facts{ResultErr: missing},
			StatusFailed, "no result: read result: file does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, detail := Classify(tc.f)
			if status != tc.status || detail != tc.detail {
				t.Errorf("Classify = %s, %q\n                want %s, %q", status, detail, tc.status, tc.detail)
			}
		})
	}
}
