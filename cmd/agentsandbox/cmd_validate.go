package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/workflow"
)

// validateOptions are the flags of `agentsandbox validate` (none yet).
type validateOptions struct{}

func newValidateCmd(stdio Stdio) *cobra.Command {
	var opts validateOptions
	return &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check workflow files and report every problem with FILE:LINE:COL",
		Long: `validate parses each workflow file and checks it: unknown keys, wrong types,
units and durations, step names, the needs DAG (missing steps, cycles),
inputs and their pins, outputs, network entries and the nixpkgs pin. It
prints "FILE: ok" for a valid file and every problem of an invalid one, one
"FILE:LINE:COL: message" line each.

Exit status:
  0  every file is valid
  2  a file is invalid or cannot be read`,
		Example: `  agentsandbox validate examples/hello.yaml
  agentsandbox validate workflows/*.yaml`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runValidate(cmd.Context(), stdio, opts, args)
		},
	}
}

func runValidate(_ context.Context, stdio Stdio, _ validateOptions, args []string) error {
	invalid := false
	for _, path := range args {
		if _, _, err := loadWorkflow(path); err != nil {
			invalid = true
			reportLoadError(stdio.Err, err)
			continue
		}
		fmt.Fprintf(stdio.Out, "%s: ok\n", path)
	}
	if invalid {
		return &silentError{code: ExitInvalid}
	}
	return nil
}

// loadWorkflow reads, parses and validates the workflow at path; every
// command that takes a workflow file goes through it, so checks added here
// (such as policy admission) apply to all of them. An invalid workflow
// gives a *workflow.ErrorList marked ExitInvalid.
func loadWorkflow(path string) (*workflow.Workflow, []byte, error) {
	w, data, err := workflow.ParseFile(path)
	if err != nil {
		return nil, data, withExit(ExitInvalid, err)
	}
	return w, data, nil
}

// reportLoadError prints a loadWorkflow error: a list of problems one per
// line, anything else as a single line.
func reportLoadError(out io.Writer, err error) {
	var list *workflow.ErrorList
	if errors.As(err, &list) {
		for _, e := range list.Errors {
			fmt.Fprintln(out, e.Error())
		}
		return
	}
	fmt.Fprintf(out, "agentsandbox: %v\n", err)
}
