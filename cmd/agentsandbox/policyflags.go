package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
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

// loadPolicy loads and compiles the policy for the workflow at wfPath: the
// flags' sources and the workflow's own .agentsandbox/policy folder.
// Mistakes in the sources exit with status 2. serve, which compiles once
// for its whole life, and `policy eval` use it; the commands that admit a
// workflow once per process use cachedPolicy.
func loadPolicy(ctx context.Context, opts policyOptions, wfPath string) (*policy.Engine, error) {
	e, err := policy.Load(ctx, opts.options(wfPath))
	if err != nil {
		return nil, err
	}
	return e, nil
}

// cachedPolicy reads the same sources as loadPolicy but compiles them only
// when a decision is not in the decision cache of the state directory
// stateDir (STATEDIR/policy-cache; "" or a state directory that does not
// exist: no cache). Mistakes in reading the sources exit with status 2
// here; mistakes that only compiling finds, at admission.
func cachedPolicy(opts policyOptions, wfPath, stateDir string) (*policy.CachedEngine, error) {
	var cache *policy.DecisionCache
	if stateDir != "" {
		cache, _ = policy.OpenDecisionCache(policyCacheDir(stateDir)) // without one, every admission evaluates
	}
	e, err := policy.LoadCached(opts.options(wfPath), cache)
	if err != nil {
		return nil, err
	}
	return e, nil
}

// policyCacheDir is where the state directory keeps admission decisions
// (policy.DecisionCache).
func policyCacheDir(stateDir string) string {
	return filepath.Join(stateDir, "policy-cache")
}

// defaultStateDir is the state directory of a command without
// --state-dir, or "" when there is none.
func defaultStateDir() string {
	d, err := record.DefaultStateDir()
	if err != nil {
		return ""
	}
	return d
}

// admit runs policy admission of the workflow w under pol on host; w is
// the resolved plan (engine.Resolve), so that validate and plan judge what
// apply runs. It prints every warning to stderr as "warning: MESSAGE". A
// denial returns the decision and a *policy.DeniedError listing every
// message (exit status 3); mistakes in the policy sources exit with
// status 2.
func admit(ctx context.Context, pol *policy.CachedEngine, w *workflow.Workflow, host policy.Host, stderr io.Writer) (*policy.Decision, error) {
	d, err := pol.Eval(ctx, w, host)
	if err != nil {
		return nil, err
	}
	for _, m := range d.Warn {
		fmt.Fprintf(stderr, "warning: %s\n", m)
	}
	return d, admissionError(d)
}

// admissionError is nil for an allowed decision, else a
// *policy.DeniedError listing every message (exit status 3).
func admissionError(d *policy.Decision) error {
	if !d.Allowed() {
		return &policy.DeniedError{Decision: d}
	}
	return nil
}
