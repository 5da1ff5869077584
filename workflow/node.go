package workflow

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Helpers that walk a yaml.Node tree and report problems with positions.

type parser struct {
	file           string
	errs           ErrorList
	declaredInputs map[string]bool // every key of the inputs map, valid or not
	allowOutside   bool            // AllowOutsideInputs

	reported  map[Error]bool // the problems in errs, to drop repeats (a node reached twice through an alias)
	dropped   *Error         // the first problem past MaxErrors
	distances int            // edit distances suggest has computed
}

// MaxErrors bounds the problems one Parse reports; a last one then says
// that more were left out. A file of many thousand mistakes is refused as
// fast as one of a few.
const MaxErrors = 100

// maxDistances bounds the edit distances the suggestions of one Parse
// compute (each "did you mean" compares a name with every candidate).
const maxDistances = 100_000

func (p *parser) errAt(line, col int, format string, args ...any) {
	if line < 1 {
		line = 1
	}
	if col < 1 {
		col = 1
	}
	e := Error{File: p.file, Line: line, Col: col, Msg: fmt.Sprintf(format, args...)}
	switch {
	case p.reported[e]:
	case len(p.errs.Errors) >= MaxErrors:
		if p.dropped == nil {
			p.dropped = &e
		}
	default:
		if p.reported == nil {
			p.reported = map[Error]bool{}
		}
		p.reported[e] = true
		p.errs.Errors = append(p.errs.Errors, &e)
	}
}

// full reports whether errAt keeps no more problems.
func (p *parser) full() bool { return len(p.errs.Errors) >= MaxErrors }

// suggest is suggest within the parse's budget of edit distances: ""
// once it is spent, or once no more problems are kept.
func (p *parser) suggest(word string, candidates []string) string {
	if p.full() || p.distances+len(candidates) > maxDistances {
		return ""
	}
	p.distances += len(candidates)
	return suggest(word, candidates)
}

// finish sorts the problems found, and adds a last one saying that more
// were left out, if they were.
func (p *parser) finish() {
	p.errs.sortDedup()
	if d := p.dropped; d != nil {
		p.errs.Errors = append(p.errs.Errors, &Error{File: d.File, Line: d.Line, Col: d.Col,
			Msg: fmt.Sprintf("more problems from here on are not shown: a workflow's check stops after %d; fix those above and check again", MaxErrors)})
	}
}

func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	line, col := 1, 1
	if n != nil {
		line, col = n.Line, n.Column
	}
	p.errAt(line, col, format, args...)
}

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	if n == nil || n.Kind == yaml.AliasNode {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names what a node is in words a person who wrote YAML knows.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		switch t := n.ShortTag(); t {
		case "!!str":
			return fmt.Sprintf("the string %q", v)
		case "!!int", "!!float":
			return "the number " + v
		case "!!bool":
			return "the boolean " + v
		case "!!null":
			return "nothing (null)"
		case "!!timestamp":
			return "the date " + v
		case "!!binary":
			return "binary data"
		default:
			return fmt.Sprintf("a value tagged %q", t)
		}
	}
	return "an unsupported YAML value"
}

// quoteHint suggests quoting a scalar YAML read as another type.
func quoteHint(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode && !isNull(n) && n.ShortTag() != "!!str" && !strings.ContainsAny(n.Value, "\"\\\n") {
		return fmt.Sprintf(`; quote it: "%s"`, n.Value)
	}
	return ""
}

type pair struct {
	key  string
	k, v *yaml.Node
}

// pairs returns a mapping's entries in order, merge keys (<<) expanded:
// explicit keys win over merged ones. A null value gives no entries. Keys
// that are not plain strings and repeated keys are reported.
func (p *parser) pairs(n *yaml.Node, what string, depth int) ([]pair, bool) {
	n = resolve(n)
	if isNull(n) {
		return nil, true
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s must be a mapping, not %s", what, describe(n))
		return nil, false
	}
	var out, merged []pair
	first := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			if depth > 20 {
				p.errorf(k, "merge keys (<<) nest too deep")
				continue
			}
			srcs := []*yaml.Node{v}
			if rv := resolve(v); rv.Kind == yaml.SequenceNode {
				srcs = rv.Content
			}
			for _, s := range srcs {
				m, _ := p.pairs(s, "a merge key (<<) value", depth+1)
				merged = append(merged, m...)
			}
			continue
		}
		if k.Kind != yaml.ScalarNode || isNull(k) {
			p.errorf(k, "keys in %s must be names, not %s", what, describe(k))
			continue
		}
		if prev, dup := first[k.Value]; dup {
			p.errorf(k, "duplicate key %q in %s (first set on line %d)", k.Value, what, prev.Line)
			continue
		}
		first[k.Value] = k
		out = append(out, pair{key: k.Value, k: k, v: v})
	}
	for _, m := range merged {
		if _, dup := first[m.key]; dup {
			continue
		}
		first[m.key] = m.k
		out = append(out, m)
	}
	return out, true
}

// fields reads a mapping whose keys must come from known; unknown keys are
// reported with a suggestion.
func (p *parser) fields(n *yaml.Node, what string, known []string) (map[string]pair, bool) {
	return p.fieldsExt(n, what, known, false)
}

// fieldsExt is fields; with extensions, keys starting with "x-" are
// ignored (a place for YAML anchors, as in Compose files).
func (p *parser) fieldsExt(n *yaml.Node, what string, known []string, extensions bool) (map[string]pair, bool) {
	ps, ok := p.pairs(n, what, 0)
	if !ok {
		return nil, false
	}
	m := make(map[string]pair, len(ps))
	for _, e := range ps {
		if extensions && strings.HasPrefix(e.key, "x-") {
			continue
		}
		if !contains(known, e.key) {
			hint := p.suggest(e.key, known)
			if hint == "" {
				hint = " (known keys: " + strings.Join(known, ", ") + ")"
			}
			p.errorf(e.k, "unknown key %q in %s%s", e.key, what, hint)
			continue
		}
		m[e.key] = e
	}
	return m, true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// str reads a string scalar.
func (p *parser) str(n *yaml.Node, what string) (string, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		p.errorf(n, "%s must be a string, not %s%s", what, describe(n), quoteHint(n))
		return "", false
	}
	return n.Value, true
}

// integer reads a whole number in [lo, hi].
func (p *parser) integer(n *yaml.Node, what string, lo, hi int64) (int64, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		p.errorf(n, "%s must be a whole number, not %s", what, describe(n))
		return 0, false
	}
	// yaml.v3 resolves !!int the same way: strip '_', then base prefixes.
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	if err != nil || v < lo || v > hi {
		p.errorf(n, "%s must be from %d to %d, not %s", what, lo, hi, n.Value)
		return 0, false
	}
	return v, true
}

// list reads a sequence; null is an empty list.
func (p *parser) list(n *yaml.Node, what, example string) ([]*yaml.Node, bool) {
	n = resolve(n)
	if isNull(n) {
		return nil, true
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "%s must be a list, such as %s, not %s", what, example, describe(n))
		return nil, false
	}
	return n.Content, true
}

// strList reads a list of strings, each checked by check (which reports its
// own errors and returns the normalised value and whether it is valid).
func (p *parser) strList(n *yaml.Node, what, example string, check func(s string, n *yaml.Node) (string, bool)) []ref {
	items, _ := p.list(n, what, example)
	var out []ref
	for _, it := range items {
		s, ok := p.str(it, "each entry of "+what)
		if !ok {
			continue
		}
		if check != nil {
			if s, ok = check(s, resolve(it)); !ok {
				continue
			}
		}
		out = append(out, ref{name: s, node: resolve(it)})
	}
	return out
}

// ref is a name as written, with where it was written.
type ref struct {
	name string
	node *yaml.Node
}
