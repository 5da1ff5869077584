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
package agent
