package workflow

import (
	"regexp"
	"sync"
)

// lazyRegexp compiles expr on first use rather than at every start of the
// CLI: patterns with bounded repetition ({0,62}) compile into large
// programs, and most commands never match them.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
