// Command agentsandbox compiles declarative workflows into isolated,
// reproducible, recorded runs. See README.md and docs/.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal cancels the run, which removes what it created;
		// the second exits at once and leaves leftovers to `agentsandbox gc`.
		s := <-signals
		fmt.Fprintf(os.Stderr, "agentsandbox: %v: stopping and cleaning up (again to exit at once)\n", s)
		cancel()
		s = <-signals
		fmt.Fprintf(os.Stderr, "agentsandbox: %v: exiting without cleanup; run `agentsandbox gc` to remove leftovers\n", s)
		os.Exit(128 + int(s.(syscall.Signal)))
	}()
	code := Execute(ctx, Stdio{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}, os.Args[1:])
	cancel()
	os.Exit(code)
}
