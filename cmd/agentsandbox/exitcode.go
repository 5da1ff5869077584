package main

import (
	"errors"
	"fmt"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/inputs"
	"github.com/agentsandbox/agentsandbox/nixbuild"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/vmrunner/seccomp"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Exit statuses. Every command's help lists the ones it uses.
const (
	ExitOK         = 0 // success
	ExitStepFailed = 1 // a step ran and failed (or a check, such as records verify, found a mismatch)
	ExitInvalid    = 2 // invalid input: workflow, flags, policy source
	ExitDenied     = 3 // policy denied the workflow
	ExitBuild      = 4 // Nix evaluation or build failed
	ExitInfra      = 5 // sandbox or infrastructure error
)

const exitStatusHelp = `

Exit status:
  0  success
  1  a step failed, or a check found a mismatch
  2  invalid input (workflow, flags, policy source)
  3  policy denied the workflow
  4  Nix evaluation or build failed
  5  sandbox or infrastructure error`

// An error says what it means by its type: the packages that produce
// one give it (workflow.ErrorList, policy.DeniedError, engine.BuildError,
// nixbuild's and inputs' sentinels, a server's answer), and exitCode maps each to its
// exit status. What only a command knows (that a file it was told to
// read is the caller's input, that a record it reads back is a check)
// it says with one of the wrappers below. An error with no meaning is
// an infrastructure error.

// invalidError is the caller's input that is wrong: a flag, an argument,
// a file one of them names.
type invalidError struct{ err error }

func (e *invalidError) Error() string { return e.err.Error() }
func (e *invalidError) Unwrap() error { return e.err }

// invalid marks err as invalid input; nil stays nil.
func invalid(err error) error {
	if err == nil {
		return nil
	}
	return &invalidError{err}
}

// invalidf is invalid(fmt.Errorf(format, args...)).
func invalidf(format string, args ...any) error {
	return invalid(fmt.Errorf(format, args...))
}

// checkError is a check that found a mismatch: a record that does not
// verify, a rerun that did not reproduce, runs that differ, steps that
// failed.
type checkError struct{ err error }

func (e *checkError) Error() string { return e.err.Error() }
func (e *checkError) Unwrap() error { return e.err }

// checkFailed marks err as a failed check; nil stays nil.
func checkFailed(err error) error {
	if err == nil {
		return nil
	}
	return &checkError{err}
}

// errStepFailed is a run in which a step failed; the summary said which.
var errStepFailed = checkFailed(errors.New("a step failed"))

// reportedError is a failure the command has already reported in full
// (a list of validation errors, a summary table): Execute prints nothing
// more, and the exit status is err's.
type reportedError struct{ err error }

func (e *reportedError) Error() string { return e.err.Error() }
func (e *reportedError) Unwrap() error { return e.err }

// reported marks err as already reported; nil stays nil.
func reported(err error) error {
	if err == nil {
		return nil
	}
	return &reportedError{err}
}

// commandExit is the exit status of a command run in a sandbox (sandbox
// exec), passed on as this command's, as ssh does.
type commandExit struct{ code int }

func (e *commandExit) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// exitCode is the one switch from errors to exit statuses. The
// wrappers a command chose come first; then the packages' own errors,
// the host's Nix setup before a build's failure (a build fails for
// want of build users or of a new enough Nix too).
func exitCode(err error) int {
	var (
		command *commandExit
		denied  *policy.DeniedError
		source  *policy.SourceError
		build   *engine.BuildError
		answer  *apiError
	)
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &command):
		return command.code
	case errors.As(err, new(*invalidError)):
		return ExitInvalid
	case errors.As(err, new(*checkError)):
		return ExitStepFailed
	case errors.As(err, &answer):
		return answerExit(answer)
	case errors.As(err, new(*workflow.ErrorList)), errors.Is(err, errInputGone):
		return ExitInvalid
	case errors.As(err, &denied):
		return ExitDenied // every message; warnings went first
	case errors.As(err, &source):
		return ExitInvalid // a policy source that fails to compile or evaluate
	case errors.Is(err, seccomp.ErrNotRelaxable):
		return ExitInvalid // the policy data asks for it
	case errors.Is(err, nixbuild.ErrBuildUsers), errors.Is(err, nixbuild.ErrNixTooOld):
		return ExitInfra // the host's Nix setup, not the workflow
	case errors.As(err, &build):
		return ExitBuild
	case errors.Is(err, nixbuild.ErrNixMissing), errors.Is(err, engine.ErrNoNix):
		return ExitInfra
	case errors.Is(err, inputs.ErrChecksum), errors.Is(err, inputs.ErrOutside):
		return ExitInvalid
	default:
		return ExitInfra
	}
}

// answerExit is the exit status of a server's error answer: the server
// refused a bad request (2) or its policy did (3); anything else is the
// server's failure (5).
func answerExit(e *apiError) int {
	switch e.Body.Code {
	case sandboxes.CodeBadRequest:
		return ExitInvalid
	case sandboxes.CodeDenied:
		return ExitDenied
	default:
		return ExitInfra
	}
}
