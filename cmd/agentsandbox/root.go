package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Stdio is where a command reads and writes; tests pass buffers.
type Stdio struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// Execute runs the CLI with args (without the program name) and returns the
// process exit status. It is the only place errors become exit statuses.
func Execute(ctx context.Context, stdio Stdio, args []string) int {
	defer startTelemetry(stdio.Err)() // off unless OTEL_* says so
	root := newRootCmd(stdio)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var silent *reportedError
	if !errors.As(err, &silent) {
		fmt.Fprintf(stdio.Err, "agentsandbox: %v\n", err)
	}
	return exitCode(err)
}

func newRootCmd(stdio Stdio) *cobra.Command {
	root := &cobra.Command{
		Use:   "agentsandbox",
		Short: "Run declarative workflows in isolated, reproducible, recorded sandboxes",
		Long: `agentsandbox runs the steps of a YAML workflow, each in its own microVM or
namespace jail with hard quotas and no network unless policy allows it, and
leaves a content-addressed record of what ran.` + exitStatusHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(stdio.In)
	root.SetOut(stdio.Out)
	root.SetErr(stdio.Err)
	// Usage mistakes (unknown flag, wrong argument count) are invalid input.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return invalidf("%w", err) })
	root.AddCommand(
		newVersionCmd(stdio),
		newRenderCmd(stdio),
		newValidateCmd(stdio), newPlanCmd(stdio), newSchemaCmd(stdio),
		newPolicyCmd(stdio),
		newApplyCmd(stdio), newRerunCmd(stdio), newRecordsCmd(stdio), newGCCmd(stdio),
		newServeCmd(stdio), newSandboxCmd(stdio), newMCPCmd(stdio),
		newKeygenCmd(stdio),
	)
	for _, c := range root.Commands() {
		c.Args = wrapArgs(c.Args)
	}
	return root
}

// wrapArgs marks argument-count errors as usage errors (exit status 2).
func wrapArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	if check == nil {
		return nil
	}
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return invalidf("%s: %w", cmd.CommandPath(), err)
		}
		return nil
	}
}
