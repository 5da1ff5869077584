package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// planOptions are the flags of `agentsandbox plan`.
type planOptions struct {
	json   bool
	policy policyOptions
}

func newPlanCmd(stdio Stdio) *cobra.Command {
	var opts planOptions
	cmd := &cobra.Command{
		Use:   "plan FILE",
		Short: "Show the steps of a workflow in the waves they run in, with their limits",
		Long: `plan validates a workflow and shows how it would run: the steps in waves (the
steps of one wave need only earlier waves, so they may run in parallel),
each step's vcpu, memory, pids, disk, timeout, bandwidth, network, isolation
and hypervisor after defaults, and the workflow hash (sha256 of its
canonical form). The isolation is the one the step would run with here:
auto is resolved as apply resolves it (vm where KVM runs a guest, Nix and
qemu are installed, running as root, and nixpkgs is pinned; else namespace).
It runs nothing. With --json the same as one JSON object. The workflow must
pass the policy first, judged on that same plan, as for validate and apply.

Exit status:
  0  the workflow is valid and allowed; the plan is printed
  2  the workflow is invalid or cannot be read, or a policy source is broken
  3  the policy denied the workflow`,
		Example: `  agentsandbox plan examples/hello.yaml
  agentsandbox plan --json examples/ml-experiment.yaml | jq '.waves[][] .name'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPlan(cmd.Context(), stdio, opts, args)
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the plan as JSON")
	opts.policy.AddFlags(cmd.Flags())
	return cmd
}

// planJSON is the --json output. Sizes are bytes, bandwidth bits per
// second, timeouts milliseconds, as in the canonical form.
type planJSON struct {
	File    string            `json:"file"`
	Name    string            `json:"name"`
	Hash    workflow.Hash     `json:"hash"`
	Nixpkgs *workflow.Nixpkgs `json:"nixpkgs"`
	Waves   [][]planStep      `json:"waves"`
}

type planStep struct {
	Name       string              `json:"name"`
	Needs      []string            `json:"needs"`
	Resources  workflow.Resources  `json:"resources"`
	Network    workflow.Network    `json:"network"`
	Isolation  workflow.Isolation  `json:"isolation"`
	Hypervisor workflow.Hypervisor `json:"hypervisor"`
	Packages   []string            `json:"packages"`
	Outputs    []string            `json:"outputs"`
}

func runPlan(ctx context.Context, stdio Stdio, opts planOptions, args []string) error {
	path := args[0]
	w, _, err := loadWorkflow(path, opts.policy.parseOptions()...)
	if err != nil {
		reportLoadError(stdio.Err, err)
		return &silentError{code: exitCode(err)}
	}
	// What apply would run here: each step's isolation resolved, and
	// admitted as such.
	host := hostFacts(ctx)
	plan, err := engine.Resolve(w, "", host)
	if err != nil {
		return err
	}
	if _, err := admit(ctx, opts.policy, path, plan, host, stdio.Err); err != nil {
		return err
	}
	p := planJSON{File: path, Name: w.Name, Hash: w.Hash(), Nixpkgs: w.Nixpkgs, Waves: [][]planStep{}}
	for _, wave := range plan.Waves() {
		ws := make([]planStep, 0, len(wave))
		for _, name := range wave {
			s, _ := plan.StepByName(name)
			ws = append(ws, planStep{Name: s.Name, Needs: s.Needs, Resources: s.Resources, Network: s.Network,
				Isolation: s.Isolation, Hypervisor: s.Hypervisor, Packages: s.Packages, Outputs: s.Outputs})
		}
		p.Waves = append(p.Waves, ws)
	}
	if opts.json {
		enc := json.NewEncoder(stdio.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(p)
	}
	fmt.Fprintf(stdio.Out, "workflow %s (%s)\n", p.Name, path)
	fmt.Fprintf(stdio.Out, "hash     %s\n", p.Hash)
	if p.Nixpkgs != nil {
		fmt.Fprintf(stdio.Out, "nixpkgs  %s\n", p.Nixpkgs.Ref)
	} else {
		fmt.Fprintf(stdio.Out, "nixpkgs  none (steps use the host's tools)\n")
	}
	fmt.Fprintln(stdio.Out)
	tw := tabwriter.NewWriter(stdio.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WAVE\tSTEP\tVCPU\tMEMORY\tPIDS\tDISK\tTIMEOUT\tBANDWIDTH\tNETWORK\tISOLATION\tHYPERVISOR\tNEEDS")
	for i, wave := range p.Waves {
		for _, s := range wave {
			r := s.Resources
			net := "none"
			if s.Network.HasEgress() {
				net = strings.Join(s.Network.Allow, ",")
			}
			needs := "-"
			if len(s.Needs) > 0 {
				needs = strings.Join(s.Needs, ",")
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i+1, s.Name, r.VCPU,
				workflow.FormatSize(r.Memory), r.PIDs, workflow.FormatSize(r.Disk), workflow.FormatTimeout(r.TimeoutMS),
				workflow.FormatBandwidth(r.Bandwidth), net, s.Isolation, s.Hypervisor, needs)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return nil
}
