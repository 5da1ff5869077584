package main

import (
	"errors"
	"fmt"
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

// exitError attaches an exit status to an error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withExit marks err with an exit status; nil stays nil.
func withExit(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

func usageErrorf(format string, args ...any) error {
	return withExit(ExitInvalid, fmt.Errorf(format, args...))
}

// silentError carries an exit status for a failure the command has already
// reported in full (such as a list of validation errors).
type silentError struct{ code int }

func (e *silentError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// exitCode is the one switch from errors to exit statuses.
func exitCode(err error) int {
	var s *silentError
	var e *exitError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &s):
		return s.code
	case errors.As(err, &e):
		return e.code
	default:
		return ExitInfra
	}
}
