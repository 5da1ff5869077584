package workflow

import (
	"fmt"
	"sort"
	"strings"
)

// Error is one problem in a workflow file, at a 1-based line and column.
type Error struct {
	File string
	Line int
	Col  int
	Msg  string
}

// Error returns "FILE:LINE:COL: message".
func (e *Error) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
}

// ErrorList is every problem Parse found, sorted by position.
type ErrorList struct {
	Errors []*Error
}

// Error returns one "FILE:LINE:COL: message" line per problem.
func (l *ErrorList) Error() string {
	lines := make([]string, len(l.Errors))
	for i, e := range l.Errors {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// sortDedup orders the errors by position and drops exact repeats (a node
// reached twice through a YAML alias reports its problem once).
func (l *ErrorList) sortDedup() {
	sort.SliceStable(l.Errors, func(i, j int) bool {
		a, b := l.Errors[i], l.Errors[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	out := l.Errors[:0]
	seen := make(map[Error]bool, len(l.Errors))
	for _, e := range l.Errors {
		if seen[*e] {
			continue
		}
		seen[*e] = true
		out = append(out, e)
	}
	l.Errors = out
}
