// Package policy is agentsandbox's admission step: every workflow passes an
// OPA rego policy before anything is built or run.
//
// Load reads the embedded default policy (default.rego, package
// agentsandbox, with its settings in default_data.json), the user's policy
// folders and data files, compiles them once with deterministic capabilities
// (no network, clock or random builtins) and prepares the query. Eval builds
// the input document {"workflow": <canonical workflow>, "host": Host} and
// returns a Decision: the deny and warn messages of every package
// agentsandbox (and agentsandbox.*) plus digests that pin what was decided:
// the bundle digest over the policy files and data, the input digest, and a
// decision id over both.
//
// Test runs a policy folder's *_test.rego files with OPA's tester under the
// same capabilities. The package is pure: it reads files, never the host;
// callers probe the host and pass Host.
//
// docs/policy.md documents the input shape, the data keys and how to write
// a team's own rules.
package policy
