// Package agent is the guest agent: it reads a guest.Job from a control
// directory, runs it as the job's user with its environment and timeout,
// sends its output to the console and to the log files, and writes the
// guest.Result. The same binary is PID 1 of every sandbox: the static
// cmd/agentsandbox-guest, in a VM and as the init of a namespace jail.
//
// For a session job (guest.Job.Session) the jail's init runs RunSession
// instead: the agent stays PID 1 and serves commands on the control
// directory's socket (guest/session.go) until SIGTERM. In a VM, RunVM
// serves them over the virtio-serial port guest.SessionPort, each
// guest/mux stream one connection, until the host's goaway.
//
// A batch job and a session's command run through one process runner
// (proc.go: startProc, proc.wait) with one reaper (reaper.go): the command
// leads its own process group, and whatever is left in that group is
// killed when its main process ends; a timeout sends SIGTERM to the group
// and SIGKILL guest.KillGrace later; output is read for at most
// drainTimeout after the end; the exit and the rusage come from wait4.
// The exec request's defaults (the workdir) are applied once, by
// guest.SessionRequest.ExecJob, after guest.SessionRequest.Check.
package agent
