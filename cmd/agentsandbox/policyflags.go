package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// policyOptions are the policy flags every command that admits a workflow
// shares (validate, plan, apply, policy eval).
type policyOptions struct {
	Dirs      []string
	DataFiles []string
	NoDefault bool
	// AllowOutsideInputs admits file inputs whose source leaves the
	// workflow's directory (refused by default, when parsing and again
	// when fetching).
	AllowOutsideInputs bool
}

// AddFlags adds --policy, --policy-data, --no-default-policy and
// --allow-outside-inputs.
func (o *policyOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringArrayVar(&o.Dirs, "policy", nil, "folder of *.rego rules loaded with the default policy (repeatable)")
	o.addDataFlags(fs)
	fs.BoolVar(&o.AllowOutsideInputs, "allow-outside-inputs", false, "accept file inputs whose source lies outside the workflow's directory (../data.csv, or through a symlink)")
}

// parseOptions are the workflow parser's options these flags set.
func (o policyOptions) parseOptions() []workflow.ParseOption {
	return []workflow.ParseOption{workflow.AllowOutsideInputs(o.AllowOutsideInputs)}
}

// addDataFlags adds the flags `policy test` shares: it takes folders as
// arguments instead of --policy.
func (o *policyOptions) addDataFlags(fs *pflag.FlagSet) {
	fs.StringArrayVar(&o.DataFiles, "policy-data", nil, "YAML or JSON policy data merged over the defaults, later files winning (repeatable)")
	fs.BoolVar(&o.NoDefault, "no-default-policy", false, "leave out the built-in default policy and its data")
}

// options returns the policy.Options for the workflow at wfPath: the flags
// plus the workflow's own .agentsandbox/policy folder when it exists.
func (o policyOptions) options(wfPath string) policy.Options {
	opts := policy.Options{
		Dirs:      append([]string(nil), o.Dirs...),
		DataFiles: append([]string(nil), o.DataFiles...),
		NoDefault: o.NoDefault,
	}
	if wfPath != "" {
		dir := policy.WorkflowPolicyDir(wfPath)
		if _, err := os.Stat(dir); err == nil {
			opts.Dirs = append(opts.Dirs, dir)
		}
	}
	return opts
}

// loadPolicy loads the policy for the workflow at wfPath: the flags' sources
// and the workflow's own .agentsandbox/policy folder. Mistakes in the
// sources exit with status 2.
func loadPolicy(ctx context.Context, opts policyOptions, wfPath string) (*policy.Engine, error) {
	e, err := policy.Load(ctx, opts.options(wfPath))
	if err != nil {
		return nil, policyExit(err)
	}
	return e, nil
}

// admit runs policy admission for the workflow w read from wfPath on host;
// w is the resolved plan (engine.Resolve), so that validate and plan judge
// what apply runs. It prints every warning to stderr as "warning: MESSAGE".
// A denial returns the decision and a *policy.DeniedError listing every
// message (exit status 3); mistakes in the policy sources exit with status 2.
func admit(ctx context.Context, opts policyOptions, wfPath string, w *workflow.Workflow, host policy.Host, stderr io.Writer) (*policy.Decision, error) {
	e, err := loadPolicy(ctx, opts, wfPath)
	if err != nil {
		return nil, err
	}
	d, err := e.Eval(ctx, w, host)
	if err != nil {
		return nil, policyExit(err)
	}
	for _, m := range d.Warn {
		fmt.Fprintf(stderr, "warning: %s\n", m)
	}
	return d, admissionExit(d)
}

// admissionExit is nil for an allowed decision, else a *policy.DeniedError
// listing every message, with exit status 3.
func admissionExit(d *policy.Decision) error {
	if !d.Allowed() {
		return withExit(ExitDenied, &policy.DeniedError{Decision: d})
	}
	return nil
}

// policyExit marks policy source mistakes as invalid input (exit status 2);
// anything else stays an infrastructure error.
func policyExit(err error) error {
	var se *policy.SourceError
	if errors.As(err, &se) {
		return withExit(ExitInvalid, err)
	}
	return err
}
