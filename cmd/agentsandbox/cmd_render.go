package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/nixgen"
)

// renderOptions are the flags of `agentsandbox render`.
type renderOptions struct {
	out          string
	projectFlake string
	system       string
}

func newRenderCmd(stdio Stdio) *cobra.Command {
	var opts renderOptions
	cmd := &cobra.Command{
		Use:   "render FILE -o DIR",
		Short: "Write the Nix flake and NixOS modules generated for a workflow",
		Long: `render compiles a workflow into the Nix that agentsandbox builds: a flake.nix
with one microvm.nix NixOS configuration, runner and package environment per
distinct environment (steps with the same packages, hypervisor, vcpu,
memory, network and shares share one), and one module per environment in
envs/<env>.nix. plan shows which steps use which environment. Read it,
commit it, or build it yourself with nix build DIR#packages.x86_64-linux.<env>.

The same workflow always gives byte-identical files. render writes only the
files it generates and leaves anything else in DIR alone.` + exitStatusHelp,
		Example: `  agentsandbox render examples/ml-experiment.yaml -o out/
  agentsandbox plan examples/ml-experiment.yaml   # the ENVIRONMENT of each step
  nix build ./out#packages.x86_64-linux.env-4f56a34253b7ca7b`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRender(cmd.Context(), stdio, opts, args)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&opts.out, "output", "o", "", "directory to write the flake into (required)")
	f.StringVar(&opts.projectFlake, "project-flake", nixgen.DefaultProjectFlake, "flake reference of agentsandbox itself (guest module and agent)")
	f.StringVar(&opts.system, "system", nixgen.DefaultSystem, "Nix system to build the VMs for")
	return cmd
}

func runRender(_ context.Context, stdio Stdio, opts renderOptions, args []string) error {
	if opts.out == "" {
		return invalidf("render: -o DIR is required: say where to write the flake")
	}
	w, _, err := loadWorkflow(args[0])
	if err != nil {
		reportLoadError(stdio.Err, err)
		return reported(err)
	}
	files, err := nixgen.Generate(w, nixgen.Options{ProjectFlake: opts.projectFlake, System: opts.system})
	if err != nil {
		return invalid(fmt.Errorf("render %s: %w", args[0], err))
	}
	if err := files.WriteDir(opts.out); err != nil {
		return fmt.Errorf("render %s: %w", args[0], err)
	}
	for _, f := range files {
		fmt.Fprintln(stdio.Out, filepath.Join(opts.out, filepath.FromSlash(f.Path)))
	}
	return nil
}
