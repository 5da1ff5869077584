package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/policy"
	"io"

	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/workflow"
)

// validateOptions are the flags of `agentsandbox validate` (none yet).
type validateOptions struct {
	Policy policyOptions
}

func newValidateCmd(stdio Stdio) *cobra.Command {
	var opts validateOptions
	cmd := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check workflow files and report every problem with FILE:LINE:COL",
		Long: `validate parses each workflow file and checks it: unknown keys, wrong types,
units and durations, step names, the needs DAG (missing steps, cycles),
inputs and their pins, outputs, network entries and the nixpkgs pin. It
prints "FILE: ok" for a valid file and every problem of an invalid one, one
"FILE:LINE:COL: message" line each.

A valid workflow is then admitted by the policy (the built-in default, the
folders given with --policy, and .agentsandbox/policy next to the workflow)
as apply would run it on this host, each step's isolation resolved: every
deny is listed and warnings are printed.

Exit status:
  0  every file is valid and allowed
  2  a file is invalid or cannot be read, or a policy source is broken
  3  the policy denied a file`,
		Example: `  agentsandbox validate examples/hello.yaml
  agentsandbox validate workflows/*.yaml`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runValidate(cmd.Context(), stdio, opts, args)
		},
	}
	opts.Policy.AddFlags(cmd.Flags())
	return cmd
}

func runValidate(ctx context.Context, stdio Stdio, opts validateOptions, args []string) error {
	var worst error // the failure with the highest exit status
	var host *policy.Host
	stateDir := defaultStateDir()
	for _, path := range args {
		pol, polErr := cachedPolicy(opts.Policy, path, stateDir)
		if polErr == nil {
			// Compile the policy on the other core while this one
			// parses, in case the decision is not in the cache: admit
			// then finds it compiled. Errors are left for admit.
			go func() { _, _ = pol.Engine(ctx) }()
		}
		w, _, err := loadWorkflow(path, opts.Policy.parseOptions()...)
		if err != nil {
			worst = worse(worst, err)
			reportLoadError(stdio.Err, err)
			continue
		}
		if polErr != nil {
			worst = worse(worst, polErr)
			fmt.Fprintf(stdio.Err, "%s: %v\n", path, polErr)
			continue
		}
		if host == nil {
			h := hostFacts(ctx)
			host = &h
		}
		plan, err := engine.Resolve(w, "", *host)
		if err != nil {
			return err
		}
		// A Nix too old for the workflow's flake: apply will refuse it.
		if err := engine.CheckNix(ctx, plan, path+".lock"); err != nil {
			fmt.Fprintf(stdio.Err, "%s: warning: %v\n", path, err)
		}
		if _, err := admit(ctx, pol, plan, *host, stdio.Err); err != nil {
			worst = worse(worst, err)
			fmt.Fprintf(stdio.Err, "%s: %v\n", path, err)
			continue
		}
		fmt.Fprintf(stdio.Out, "%s: ok\n", path)
	}
	return reported(worst)
}

// worse is the one of a and b with the higher exit status (a on a tie).
func worse(a, b error) error {
	if exitCode(b) > exitCode(a) {
		return b
	}
	return a
}

// hostFacts are the host part of the policy input, probed the way apply
// probes them (KVM with the cached probe, or as $AGENTSANDBOX_ACCEL forces
// it) so that validate, plan and apply resolve the same isolation
// (engine.Resolve) and reach the same decision.
func hostFacts(ctx context.Context) policy.Host {
	return engine.ProbeHost(ctx, kvmProbeFor(envOr(accelEnv, "auto"))).Policy()
}

// loadWorkflow reads, parses and validates the workflow at path; every
// command that takes a workflow file goes through it, so checks added here
// (such as policy admission) apply to all of them. An invalid workflow
// gives a *workflow.ErrorList marked ExitInvalid.
func loadWorkflow(path string, popts ...workflow.ParseOption) (*workflow.Workflow, []byte, error) {
	w, data, err := workflow.ParseFile(path, popts...)
	if err != nil {
		return nil, data, invalid(err)
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
