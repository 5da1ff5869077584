package workflow

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// suggest returns ` (did you mean "x"?)` for the candidate closest to word,
// or "" when none is close enough to be a likely typo.
func suggest(word string, candidates []string) string {
	if len(word) > 64 {
		return ""
	}
	limit := 2
	if len(word) <= 4 {
		limit = 1
	}
	best, bestD := "", -1
	lw := strings.ToLower(word)
	n := utf8.RuneCountInString(lw)
	for _, c := range candidates {
		// The distance is at least the difference in length: a candidate
		// too long or too short is never the one, and is not compared
		// (a name from the file may be of any length).
		lc := strings.ToLower(c)
		if m := utf8.RuneCountInString(lc); m > n+limit || m < n-limit {
			continue
		}
		d := editDistance(lw, lc)
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if bestD < 0 {
		return ""
	}
	if bestD > limit || bestD >= len(word) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the optimal-string-alignment distance: insertions,
// deletions, substitutions and transpositions of neighbours each cost one.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// quoteList renders names as `"a", "b" or "c"`.
func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	switch len(q) {
	case 0:
		return ""
	case 1:
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}
