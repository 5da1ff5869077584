package mcp

import (
	"context"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// registerRuns offers run_workflow when the manager runs workflows (the
// real one does; a manager that cannot is not offered a tool that would
// always fail).
func (t *tools) registerRuns(s *sdk.Server) {
	runner, ok := t.m.(sandboxes.Runner)
	if !ok {
		return
	}
	addTool(s, &sdk.Tool{Name: "run_workflow", Title: "Run a workflow",
		Description: "Run a whole agentsandbox workflow (YAML: steps, each in its own sandbox, with inputs, outputs, quotas and network rules) as `agentsandbox apply` would, and wait for it to end. Give either workflow (a file in the server's template directory) or inline (the YAML itself). Returns each step's status, exit code, the end of its output and its outputs' hashes, and the id of the run's execution record. A failed step is a normal result: read its status and stderr.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)}},
		func(ctx context.Context, a RunArgs) (sandboxes.RunInfo, string, error) {
			info, err := runner.Run(ctx, sandboxes.RunRequest{Workflow: a.Workflow, Inline: a.Inline, Isolation: a.Isolation})
			if err != nil {
				return sandboxes.RunInfo{}, "", err
			}
			return info, runSummary(info), nil
		})
}

// RunArgs are run_workflow's arguments.
type RunArgs struct {
	Workflow  string `json:"workflow,omitempty" jsonschema:"a workflow file in the server's template directory, as a relative path such as ci.yaml"`
	Inline    string `json:"inline,omitempty" jsonschema:"the workflow's YAML itself (apiVersion, kind, name, steps), instead of a file"`
	Isolation string `json:"isolation,omitempty" jsonschema:"overrides every step's isolation: namespace, vm or auto"`
}

// runSummary is the text a model reads: the outcome, then each step.
func runSummary(i sandboxes.RunInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "workflow %s %s; record %s\n", i.Workflow, i.Status, i.Record)
	if i.Error != "" {
		fmt.Fprintf(&b, "error: %s\n", i.Error)
	}
	for _, s := range i.Steps {
		fmt.Fprintf(&b, "step %s: %s, exit %d, %d ms", s.Name, s.Status, s.ExitCode, s.DurationMS)
		if s.Detail != "" {
			fmt.Fprintf(&b, " (%s)", s.Detail)
		}
		b.WriteString("\n")
		if s.Stdout != "" {
			fmt.Fprintf(&b, "  stdout:\n%s\n", indent(s.Stdout))
		}
		if s.Stderr != "" {
			fmt.Fprintf(&b, "  stderr:\n%s\n", indent(s.Stderr))
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}
