package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/workflow"
)

// schemaOptions are the flags of `agentsandbox schema` (none yet).
type schemaOptions struct{}

func newSchemaCmd(stdio Stdio) *cobra.Command {
	var opts schemaOptions
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of the workflow format, for editors",
		Long: `schema prints a JSON Schema (draft 2020-12) of the workflow YAML format.
Point yaml-language-server at it for completion and checks while editing;
agentsandbox validate checks more (the DAG, references, pins).

Exit status:
  0  the schema was printed`,
		Example: `  agentsandbox schema > .agentsandbox-schema.json
  # then, first line of a workflow file:
  # yaml-language-server: $schema=.agentsandbox-schema.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSchema(cmd.Context(), stdio, opts, args)
		},
	}
}

func runSchema(_ context.Context, stdio Stdio, _ schemaOptions, _ []string) error {
	_, err := stdio.Out.Write(workflow.Schema())
	return err
}
