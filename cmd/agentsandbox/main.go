// Command agentsandbox compiles declarative workflows into isolated,
// reproducible, recorded runs. See README.md and docs/.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// The sandbox init re-executes this binary; it must be dispatched before
	// anything else runs (see vmrunner's jail). Added by the apply work.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Execute(ctx, Stdio{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}
