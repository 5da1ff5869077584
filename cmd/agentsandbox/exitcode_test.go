package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/inputs"
	"github.com/agentsandbox/agentsandbox/nixbuild"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/vmrunner/seccomp"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// TestExitCode is the table of the one switch from errors to exit
// statuses: each meaning, found however deep it is wrapped, and which
// wins when an error carries two.
func TestExitCode(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("step %q: %w", "s", err) }
	denied := &policy.DeniedError{Decision: &policy.Decision{Deny: []string{"no"}}}
	build := &engine.BuildError{Err: errors.New("builder failed")}
	answer := func(code sandboxes.Code) error {
		return &apiError{Status: 400, Body: sandboxes.Error{Code: code, Message: "refused"}}
	}
	for _, c := range []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, ExitOK},
		{"plain", errors.New("disk full"), ExitInfra},
		{"canceled", wrap(context.Canceled), ExitInfra},
		{"invalid", wrap(invalidf("--flag %q", "x")), ExitInvalid},
		{"invalid nil", invalid(nil), ExitOK},
		{"check", wrap(checkFailed(errors.New("hash mismatch"))), ExitStepFailed},
		{"step failed", reported(errStepFailed), ExitStepFailed},
		{"reported keeps the meaning", reported(denied), ExitDenied},
		{"reported plain", reported(errors.New("x")), ExitInfra},
		{"command exit", reported(&commandExit{42}), 42},
		{"command exit over a wrapper", invalid(&commandExit{7}), 7},
		{"invalid over a package's meaning", invalid(wrap(build)), ExitInvalid},
		{"check over a package's meaning", checkFailed(wrap(denied)), ExitStepFailed},
		{"workflow errors", wrap(&workflow.ErrorList{}), ExitInvalid},
		{"input gone", wrap(errInputGone), ExitInvalid},
		{"denied", wrap(denied), ExitDenied},
		{"policy source", wrap(&policy.SourceError{Problems: []string{"team.rego:1:1: x"}}), ExitInvalid},
		{"denied over source", errors.Join(denied, &policy.SourceError{Problems: []string{"team.rego:1:1: x"}}), ExitDenied},
		{"seccomp", wrap(seccomp.ErrNotRelaxable), ExitInvalid},
		{"build", wrap(build), ExitBuild},
		{"build users", &engine.BuildError{Err: wrap(nixbuild.ErrBuildUsers)}, ExitInfra},
		{"nix too old", &engine.BuildError{Err: nixbuild.ErrNixTooOld}, ExitInfra},
		{"nix missing", wrap(nixbuild.ErrNixMissing), ExitInfra},
		{"no nix", wrap(engine.ErrNoNix), ExitInfra},
		{"build over nix missing", &engine.BuildError{Err: nixbuild.ErrNixMissing}, ExitBuild},
		{"checksum", wrap(inputs.ErrChecksum), ExitInvalid},
		{"outside", wrap(inputs.ErrOutside), ExitInvalid},
		{"bad request", wrap(answer(sandboxes.CodeBadRequest)), ExitInvalid},
		{"server denied", wrap(answer(sandboxes.CodeDenied)), ExitDenied},
		{"server failed", wrap(answer(sandboxes.CodeInternal)), ExitInfra},
		{"server not found", wrap(answer(sandboxes.CodeNotFound)), ExitInfra},
	} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("%s: exitCode(%v) = %d, want %d", c.name, c.err, got, c.want)
		}
	}
}

// TestWorse keeps the failure with the higher exit status, the first on a
// tie.
func TestWorse(t *testing.T) {
	a, b := invalidf("a"), invalidf("b")
	denied := &policy.DeniedError{Decision: &policy.Decision{}}
	if got := worse(nil, a); got != a {
		t.Errorf("worse(nil, a) = %v", got)
	}
	if got := worse(a, b); got != a {
		t.Errorf("worse(a, b) on a tie = %v, want a", got)
	}
	if got := worse(a, denied); got != denied {
		t.Errorf("worse(invalid, denied) = %v, want denied", got)
	}
	if got := worse(denied, a); got != denied {
		t.Errorf("worse(denied, invalid) = %v, want denied", got)
	}
}

// TestAPIErrorDecision names the decision that refused a request.
func TestAPIErrorDecision(t *testing.T) {
	e := &apiError{Body: sandboxes.Error{Code: sandboxes.CodeDenied, Message: "denied by policy", Decision: "dec-1"}}
	if got, want := fmt.Errorf("create a sandbox: %w", e).Error(), "create a sandbox: denied by policy (decision dec-1)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	e.Body.Code = sandboxes.CodeBadRequest
	if got := e.Error(); got != "denied by policy" {
		t.Errorf("a bad request's message: %q", got)
	}
}
