// Package agent is the guest agent: it reads a guest.Job from a control
// directory, runs it as the job's user with its environment and timeout,
// sends its output to the console and to the log files, and writes the
// guest.Result. The same code is PID 1 of every sandbox: the static
// cmd/agentsandbox-guest in a VM, and the jail's init in a namespace.
package agent
