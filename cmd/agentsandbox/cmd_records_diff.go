package main

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/record"
)

type recordsDiffOptions struct {
	recordsOptions
	// exitCode makes a difference exit status 1, like git diff --exit-code.
	exitCode bool
}

// newRecordsDiffCmd is `records diff A B`: how run B differs from run A.
func newRecordsDiffCmd(stdio Stdio, parent *recordsOptions) *cobra.Command {
	opts := recordsDiffOptions{}
	cmd := &cobra.Command{
		Use: "diff A B", Short: "Show how run B differs from run A (--json: as one object)", Args: wrapArgs(cobra.ExactArgs(2)),
		Long: `diff compares two records, section by section, printing only what differs:
the run (tool version, status), the workflow (file and canonical hashes, and the
changed YAML field paths such as steps.train.resources.memory), the policy
decision, the inputs, the host, and each step (isolation, environment, closure
store paths, status and exit code, logs, network counts, and every output that
changed, file by file). It prints "identical" when nothing does.

What a run measured (durations, CPU time, peak memory, pids, bytes sent)
differs between any two runs: it is printed with its delta but does not make
runs differ. Both records, the workflow files and the output NARs are verified
as they are read; a blob this store lacks is noted, not compared.

The exit status is 0 whether or not the runs differ; with --exit-code it is 1
when they do.` + exitStatusHelp,
		Example: "  agentsandbox records diff 1b9x 0zq4\n  agentsandbox records diff --exit-code 1b9x 0zq4 >/dev/null || echo differs\n  agentsandbox records diff --json 1b9x 0zq4 | jq '.steps[].outputs'",
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.recordsOptions = *parent
			return runRecordsDiff(cmd.Context(), stdio, opts, args)
		},
	}
	cmd.Flags().BoolVar(&parent.JSON, "json", false, "print the comparison as one JSON object (docs/records.md)")
	cmd.Flags().BoolVar(&opts.exitCode, "exit-code", false, "exit with status 1 when the runs differ")
	return cmd
}

func runRecordsDiff(ctx context.Context, stdio Stdio, opts recordsDiffOptions, args []string) error {
	s, a, err := resolveRecord(ctx, stdio, opts.recordsOptions, args[0])
	if err != nil {
		return err
	}
	rm, err := openRemote(opts.Store)
	if err != nil {
		return err
	}
	b, err := resolveShared(ctx, stdio.Err, s, rm, args[1])
	if err != nil {
		return err
	}
	d, err := s.DiffRecords(a, b)
	if errors.Is(err, record.ErrHashMismatch) {
		return checkFailed(err)
	}
	if err != nil {
		return err
	}
	if opts.JSON {
		enc := json.NewEncoder(stdio.Out)
		enc.SetIndent("", "  ")
		err = enc.Encode(d)
	} else {
		err = d.WriteText(stdio.Out)
	}
	if err != nil {
		return err
	}
	if opts.exitCode && !d.Identical {
		return reported(checkFailed(errors.New("the runs differ")))
	}
	return nil
}
