package policy

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// SourceError is a mistake in the user's policy sources: rego that does not
// parse or compile, a data file that does not decode, a policy folder that
// cannot be read. The CLI reports it with exit status 2.
type SourceError struct {
	// Problems are "FILE:ROW:COL: message" (or "FILE: message" when there is
	// no position), sorted by file and position.
	Problems []string
}

func (e *SourceError) Error() string {
	if len(e.Problems) == 1 {
		return "policy: " + e.Problems[0]
	}
	return fmt.Sprintf("policy: %d problems:\n  %s", len(e.Problems), strings.Join(e.Problems, "\n  "))
}

var undefinedFunction = regexp.MustCompile(`^undefined function ([A-Za-z0-9_.]+)$`)

// sourceError turns OPA's parse and compile errors into a *SourceError; other
// errors are returned unchanged.
func sourceError(err error) error {
	var errs ast.Errors
	if errors.As(err, &errs) {
		return &SourceError{Problems: astProblems(errs)}
	}
	var one *ast.Error
	if errors.As(err, &one) {
		return &SourceError{Problems: astProblems(ast.Errors{one})}
	}
	return err
}

func astProblems(errs ast.Errors) []string {
	errs = append(ast.Errors(nil), errs...)
	errs.Sort()
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		msg := e.Message
		if m := undefinedFunction.FindStringSubmatch(msg); m != nil && isDisabled(m[1]) {
			msg += " (disabled: policy evaluation has no network, clock or random builtins, so the same workflow and policy always give the same decision)"
		}
		if e.Location != nil && e.Location.File != "" {
			out = append(out, fmt.Sprintf("%s:%d:%d: %s", e.Location.File, e.Location.Row, e.Location.Col, msg))
		} else {
			out = append(out, msg)
		}
	}
	return out
}

// DeniedError says the policy denied a workflow; it lists every message.
type DeniedError struct {
	Decision *Decision
}

func (e *DeniedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "policy denied the workflow (decision %s):", e.Decision.ID)
	for _, m := range e.Decision.Deny {
		b.WriteString("\n  deny: ")
		b.WriteString(m)
	}
	return b.String()
}
