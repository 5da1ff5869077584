package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

type sandboxRunOptions struct {
	Conn      connOptions
	Isolation string
	Remote    bool
	JSON      bool
}

func newSandboxRunCmd(stdio Stdio) *cobra.Command {
	var opts sandboxRunOptions
	cmd := &cobra.Command{
		Use:   "run WORKFLOW",
		Short: "Run a whole workflow on the server and print how each step ended",
		Long: `run sends a workflow to the server (POST /v1/runs), which applies it as
"agentsandbox apply" would, with the server's backends, policy and store, and
prints each step's status and the run's record id once it has ended. WORKFLOW is
a local file, sent whole; with --remote it names a file in the server's template
directory instead (and file inputs resolve there in both cases).

The exit status is 1 when a step failed, like apply's.` + sandboxExitHelp,
		Example: `  agentsandbox sandbox run examples/hello.yaml
  agentsandbox sandbox run --remote ci.yaml --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSandboxRun(cmd.Context(), stdio, opts, args[0])
		},
	}
	f := cmd.Flags()
	opts.Conn.AddFlags(f)
	f.StringVar(&opts.Isolation, "isolation", "", "override every step's isolation: namespace, vm or auto")
	f.BoolVar(&opts.Remote, "remote", false, "WORKFLOW is a file in the server's template directory")
	f.BoolVar(&opts.JSON, "json", false, "print the run as JSON")
	return cmd
}

func runSandboxRun(ctx context.Context, stdio Stdio, opts sandboxRunOptions, file string) error {
	req := sandboxes.RunRequest{Isolation: opts.Isolation}
	if opts.Remote {
		req.Workflow = file
	} else {
		f, err := os.Open(file)
		if err != nil {
			return invalid(err)
		}
		b, err := io.ReadAll(io.LimitReader(f, sandboxes.MaxInlineWorkflow+1))
		f.Close()
		if err != nil {
			return invalid(fmt.Errorf("read %s: %w", file, err))
		}
		if len(b) > sandboxes.MaxInlineWorkflow {
			return invalidf("%s is over %d bytes, more than a server takes inline; put it in the server's template directory and use --remote", file, sandboxes.MaxInlineWorkflow)
		}
		req.Inline = string(b)
	}
	c, err := opts.Conn.client()
	if err != nil {
		return err
	}
	var info sandboxes.RunInfo
	if err := c.json(ctx, "POST", "/v1/runs", nil, req, &info); err != nil {
		return fmt.Errorf("run %s: %w", file, err)
	}
	if opts.JSON {
		enc := json.NewEncoder(stdio.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(info); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdio.Out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "STEP\tSTATUS\tEXIT\tDURATION\tOUTPUTS")
		for _, s := range info.Steps {
			var outs []string
			for _, o := range s.Outputs {
				outs = append(outs, o.Path)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", s.Name, s.Status, s.ExitCode,
				(time.Duration(s.DurationMS) * time.Millisecond).String(), strings.Join(outs, " "))
		}
		tw.Flush()
		fmt.Fprintf(stdio.Out, "%s %s: record %s\n", info.Workflow, info.Status, info.Record)
	}
	if info.Error != "" {
		fmt.Fprintf(stdio.Err, "agentsandbox: run %s: %s\n", file, info.Error)
	}
	if info.Status != "succeeded" {
		return reported(errStepFailed) // the table says which step
	}
	return nil
}
