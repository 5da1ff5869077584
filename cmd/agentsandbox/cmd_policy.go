package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/workflow"
)

func newPolicyCmd(stdio Stdio) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Test policy rules and show the admission decision for a workflow",
		Long: `Every workflow passes an OPA rego policy before anything is built or run:
the built-in default policy (least privilege) plus the rules of each --policy
folder and of .agentsandbox/policy/ next to the workflow. See docs/policy.md.` + exitStatusHelp,
		Example: `  agentsandbox policy test .agentsandbox/policy
  agentsandbox policy eval workflow.yaml --policy-data team.yaml`,
	}
	cmd.AddCommand(newPolicyTestCmd(stdio), newPolicyEvalCmd(stdio))
	return cmd
}

// policyTestOptions are the flags of `agentsandbox policy test`.
type policyTestOptions struct {
	policy  policyOptions
	verbose bool
}

func newPolicyTestCmd(stdio Stdio) *cobra.Command {
	var opts policyTestOptions
	cmd := &cobra.Command{
		Use:   "test [DIR...]",
		Short: "Run the *_test.rego unit tests of policy folders, like opa test",
		Long: `test loads every *.rego file below each DIR (default: .agentsandbox/policy),
together with the default policy and data unless --no-default-policy, and
runs the test_* rules of the *_test.rego files with OPA's tester. Tests see
the same restricted builtins as admission (no network, clock or random), and
print() output is shown for failing tests.

Exit status:
  0  every test passed
  1  a test failed or raised an error
  2  a policy or data file does not parse or compile, or there are no tests`,
		Example: `  agentsandbox policy test
  agentsandbox policy test -v .agentsandbox/policy policies/shared`,
		Args: wrapArgs(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPolicyTest(cmd.Context(), stdio, opts, args)
		},
	}
	opts.policy.addDataFlags(cmd.Flags())
	cmd.Flags().BoolVarP(&opts.verbose, "verbose", "v", false, "list every test, not only the failures")
	return cmd
}

func runPolicyTest(ctx context.Context, stdio Stdio, opts policyTestOptions, args []string) error {
	dirs := args
	if len(dirs) == 0 {
		dirs = []string{filepath.Join(".agentsandbox", "policy")}
	}
	sum, err := policy.Test(ctx, policy.Options{Dirs: dirs, DataFiles: opts.policy.DataFiles, NoDefault: opts.policy.NoDefault}, stdio.Out, opts.verbose)
	if err != nil {
		return err
	}
	if !sum.OK() {
		return reported(checkFailed(errors.New("a policy test failed"))) // the summary says which
	}
	return nil
}

// policyEvalOptions are the flags of `agentsandbox policy eval`.
type policyEvalOptions struct {
	policy     policyOptions
	hostFacts  string
	printInput bool
}

func newPolicyEvalCmd(stdio Stdio) *cobra.Command {
	var opts policyEvalOptions
	cmd := &cobra.Command{
		Use:   "eval FILE",
		Short: "Print the admission decision for a workflow as JSON",
		Long: `eval parses the workflow FILE, evaluates the policy (the default policy, each
--policy folder and FILE's .agentsandbox/policy/ folder, with --policy-data)
and prints the decision as JSON: id, bundleDigest, inputDigest, policies,
deny, warn and evalTimeNs.

The host facts in the input (input.host) are probed here: nix on PATH,
/dev/kvm opens, the uid, hypervisor programs on PATH. --host-facts FILE
takes them from a JSON file of the same shape instead, to see the decision
another machine would get. --print-input prints the input document instead,
to see what rules are evaluated against.

Exit status:
  0  the policy allows the workflow
  2  the workflow, a policy or data file, or the flags are invalid
  3  the policy denies the workflow`,
		Example: `  agentsandbox policy eval workflow.yaml
  agentsandbox policy eval workflow.yaml --policy policies/ --policy-data ceilings.yaml
  agentsandbox policy eval workflow.yaml --host-facts ci-host.json`,
		Args: wrapArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPolicyEval(cmd.Context(), stdio, opts, args)
		},
	}
	opts.policy.AddFlags(cmd.Flags())
	cmd.Flags().BoolVar(&opts.printInput, "print-input", false, "print the input document the rules see (input) instead of evaluating")
	cmd.Flags().StringVar(&opts.hostFacts, "host-facts", "", "JSON file with the host facts (input.host) to evaluate against instead of probing this machine")
	return cmd
}

func runPolicyEval(ctx context.Context, stdio Stdio, opts policyEvalOptions, args []string) error {
	path := args[0]
	w, _, err := workflow.ParseFile(path, opts.policy.parseOptions()...)
	if err != nil {
		var list *workflow.ErrorList
		if errors.As(err, &list) {
			for _, e := range list.Errors {
				fmt.Fprintln(stdio.Err, e.Error())
			}
			return reported(err)
		}
		return invalid(err)
	}
	host, err := evalHostFacts(ctx, opts.hostFacts)
	if err != nil {
		return err
	}
	// The rules judge what apply would run on that host: each step's
	// isolation resolved.
	if w, err = engine.Resolve(w, "", host); err != nil {
		return err
	}
	if opts.printInput {
		in, err := policy.InputDocument(w, host)
		if err != nil {
			return err
		}
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, in, "", "  "); err != nil {
			return fmt.Errorf("format input: %w", err)
		}
		_, err = fmt.Fprintf(stdio.Out, "%s\n", pretty.Bytes())
		return err
	}
	e, err := policy.Load(ctx, opts.policy.options(path))
	if err != nil {
		return err
	}
	d, err := e.Eval(ctx, w, host)
	if err != nil {
		return err
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return fmt.Errorf("encode decision: %w", err)
	}
	if _, err := fmt.Fprintf(stdio.Out, "%s\n", out); err != nil {
		return err
	}
	if !d.Allowed() {
		return reported(admissionError(d)) // the decision printed says why
	}
	return nil
}

// evalHostFacts reads --host-facts, or probes this machine as apply does.
func evalHostFacts(ctx context.Context, file string) (policy.Host, error) {
	if file == "" {
		return hostFacts(ctx), nil
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return policy.Host{}, invalidf("--host-facts: %w", err)
	}
	var h policy.Host
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return policy.Host{}, invalidf("--host-facts %s: %w; want {\"isolation\": [...], \"hypervisors\": [...], \"kvm\": bool, \"nix\": bool, \"uid\": int, \"capacity\": {\"cpus\": int, \"memoryBytes\": int, \"diskBytes\": int, \"diskPath\": string} (optional: serve's)}", file, err)
	}
	return h, nil
}
