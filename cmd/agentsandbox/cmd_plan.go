package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/nixgen"
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
and hypervisor after defaults, the environment each step is realised from
(steps with the same packages, hypervisor, vcpu, memory, network and shares
share one NixOS system, runner and package environment; see
docs/nixgen.md), and the workflow hash (sha256 of its canonical form). The isolation is the one the step would run with here:
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
	// Microvm is the microvm.nix VMs are built with: the workflow's pin, or
	// nixgen's default; null without nixpkgs.
	Microvm *workflow.Microvm `json:"microvm"`
	Waves   [][]planStep      `json:"waves"`
	// Environments lists each distinct environment Nix realises, with the
	// steps that share it; empty when no step needs Nix.
	Environments []planEnv `json:"environments"`
}

// planEnv is one environment of the plan.
type planEnv struct {
	Name        string             `json:"name"` // its attribute in the generated flake
	Hash        nixgen.EnvHash     `json:"hash"` // as the record names it
	Environment nixgen.Environment `json:"environment"`
	Steps       []string           `json:"steps"`
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
	// Environment is the name of the step's environment; empty when the
	// step needs no Nix (namespace isolation without packages).
	Environment string `json:"environment,omitempty"`
}

func runPlan(ctx context.Context, stdio Stdio, opts planOptions, args []string) error {
	path := args[0]
	w, _, err := loadWorkflow(path, opts.policy.parseOptions()...)
	if err != nil {
		reportLoadError(stdio.Err, err)
		return reported(err)
	}
	// What apply would run here: each step's isolation resolved, and
	// admitted as such.
	host := hostFacts(ctx)
	plan, err := engine.Resolve(w, "", host)
	if err != nil {
		return err
	}
	pol, err := cachedPolicy(opts.policy, path, defaultStateDir())
	if err != nil {
		return err
	}
	if _, err := admit(ctx, pol, plan, host, stdio.Err); err != nil {
		return err
	}
	p := planJSON{File: path, Name: w.Name, Hash: w.Hash(), Nixpkgs: w.Nixpkgs, Microvm: w.Microvm, Waves: [][]planStep{}, Environments: []planEnv{}}
	microvmNote := ""
	if w.Nixpkgs != nil && w.Microvm == nil {
		p.Microvm = &workflow.Microvm{Ref: nixgen.MicrovmFlake + "/" + nixgen.DefaultMicrovmRev, Rev: nixgen.DefaultMicrovmRev}
		microvmNote = " (default; needs nixpkgs " + nixgen.MinNixpkgsRelease + " or later)"
	}
	envOf, err := planEnvironments(plan, &p)
	if err != nil {
		return invalid(fmt.Errorf("plan %s: %w", path, err))
	}
	for _, wave := range plan.Waves() {
		ws := make([]planStep, 0, len(wave))
		for _, name := range wave {
			s, _ := plan.StepByName(name)
			ws = append(ws, planStep{Name: s.Name, Needs: s.Needs, Resources: s.Resources, Network: s.Network,
				Isolation: s.Isolation, Hypervisor: s.Hypervisor, Packages: s.Packages, Outputs: s.Outputs,
				Environment: envOf[s.Name]})
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
		fmt.Fprintf(stdio.Out, "microvm  %s%s\n", p.Microvm.Ref, microvmNote)
	} else {
		fmt.Fprintf(stdio.Out, "nixpkgs  none (steps use the host's tools)\n")
	}
	fmt.Fprintln(stdio.Out)
	tw := tabwriter.NewWriter(stdio.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WAVE\tSTEP\tVCPU\tMEMORY\tPIDS\tDISK\tTIMEOUT\tBANDWIDTH\tNETWORK\tISOLATION\tHYPERVISOR\tENVIRONMENT\tNEEDS")
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
			env := s.Environment
			if env == "" {
				env = "-"
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i+1, s.Name, r.VCPU,
				workflow.FormatSize(r.Memory), r.PIDs, workflow.FormatSize(r.Disk), workflow.FormatTimeout(r.TimeoutMS),
				workflow.FormatBandwidth(r.Bandwidth), net, s.Isolation, s.Hypervisor, env, needs)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(p.Environments) == 0 {
		return nil
	}
	fmt.Fprintf(stdio.Out, "\n%d environments for %d steps that need Nix:\n", len(p.Environments), nixSteps(p.Environments))
	tw = tabwriter.NewWriter(stdio.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ENVIRONMENT\tHASH\tSTEPS")
	for _, e := range p.Environments {
		fmt.Fprintf(tw, "%s\t%s\t%d: %s\n", e.Name, e.Hash, len(e.Steps), strings.Join(e.Steps, ","))
	}
	return tw.Flush()
}

// planEnvironments fills p.Environments with the environments of the steps
// apply realises with Nix (vm isolation, or packages), in the order they
// first appear, and returns each such step's environment name.
func planEnvironments(plan *workflow.Workflow, p *planJSON) (map[string]string, error) {
	envOf := map[string]string{}
	index := map[nixgen.EnvHash]int{}
	for _, wave := range plan.Waves() {
		for _, name := range wave {
			s, _ := plan.StepByName(name)
			if s.Isolation != workflow.IsolationVM && len(s.Packages) == 0 {
				continue
			}
			e, err := nixgen.EnvironmentOf(&s)
			if err != nil {
				return nil, fmt.Errorf("step %q: %w", s.Name, err)
			}
			h := e.Hash()
			j, ok := index[h]
			if !ok {
				j = len(p.Environments)
				index[h] = j
				p.Environments = append(p.Environments, planEnv{Name: h.Name(), Hash: h, Environment: e})
			}
			p.Environments[j].Steps = append(p.Environments[j].Steps, s.Name)
			envOf[s.Name] = h.Name()
		}
	}
	return envOf, nil
}

func nixSteps(envs []planEnv) int {
	n := 0
	for _, e := range envs {
		n += len(e.Steps)
	}
	return n
}
