//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/guest/agent"
	"github.com/agentsandbox/agentsandbox/vmrunner/jail/jailinit"
)

// Exit statuses when the agent is not PID 1.
const (
	exitResultWritten = 0
	exitNoResult      = 1
	exitUsage         = 2
)

func agentMain(args []string) int {
	// Started by the host's jail.Start as a namespace jail's init (PID 1 of
	// its pid namespace, so before the VM check below): build the jail,
	// then run the job or the program; never returns.
	jailinit.MaybeInit()
	if os.Getpid() == 1 {
		pid1Main(args) // never returns
	}
	controlDir, err := controlDirFromArgs(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentsandbox-guest: %v\n", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if _, err := runWithMarkers(ctx, controlDir, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "%s %v\n", guest.ConsoleErrorLine, err)
		return exitNoResult
	}
	return exitResultWritten
}

func controlDirFromArgs(args []string) (string, error) {
	switch len(args) {
	case 0:
		return guest.ControlMount, nil
	case 1:
		if args[0] == "" || args[0][0] == '-' {
			return "", fmt.Errorf("usage: agentsandbox-guest [CONTROL_DIR] (got %q)", args[0])
		}
		return args[0], nil
	default:
		return "", fmt.Errorf("usage: agentsandbox-guest [CONTROL_DIR] (got %d arguments)", len(args))
	}
}

// runWithMarkers runs the job between the start and end marker lines; a
// session job is served on the VM's session port until the host stops it
// (agent.RunVM).
func runWithMarkers(ctx context.Context, controlDir string, console io.Writer) (guest.Result, error) {
	fmt.Fprintln(console, guest.ConsoleStartLine)
	res, err := agent.RunVM(ctx, controlDir, console)
	if err != nil {
		fmt.Fprintf(console, "%s %s; result not written: %v\n", guest.ConsoleEndLine, summary(res), err)
		return res, err
	}
	fmt.Fprintf(console, "%s %s\n", guest.ConsoleEndLine, summary(res))
	return res, nil
}

// summary is the end marker's one-line description of a result.
func summary(r guest.Result) string {
	s := fmt.Sprintf("exit=%d", r.ExitCode)
	if r.Signal != "" {
		s += " signal=" + r.Signal
	}
	if r.TimedOut {
		s += " timedOut"
	}
	if r.Error != "" {
		s += fmt.Sprintf(" error=%q", r.Error)
	}
	return s
}
