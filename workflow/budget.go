package workflow

import "go.yaml.in/yaml/v3"

// Budgets on what a workflow's YAML may ask of the parser, so that a small
// file cannot cost seconds of CPU or gigabytes of memory: YAML aliases and
// merge keys (<<) repeat whole subtrees, and a few nested anchors repeat
// one node billions of times in a file of a few hundred bytes. The budgets
// are checked on the decoded node tree before anything walks it (each node
// is visited once, whatever the aliases), and a workflow over one is
// refused with an error at the alias or node that went over it.
const (
	// MaxFileSize bounds a workflow file (and an inline workflow).
	MaxFileSize = 4 << 20
	// MaxDepth bounds how deep mappings and lists nest, as written.
	MaxDepth = 100
	// MaxAliasNodes bounds the nodes YAML aliases (*name) repeat in all,
	// merge keys included: each alias counts every node of what it names,
	// the aliases inside that counted as they expand.
	MaxAliasNodes = 100_000
)

// checkBudget refuses a document whose aliases would repeat more than
// MaxAliasNodes nodes, that nests deeper than MaxDepth, or in which an
// alias names a node that contains it (which no walk could finish). It
// reports the first such problem and returns false.
func (p *parser) checkBudget(doc *yaml.Node) bool {
	b := &budget{p: p, size: map[*yaml.Node]int{}, open: map[*yaml.Node]bool{}}
	b.walk(doc, 0)
	return !b.failed
}

type budget struct {
	p      *parser
	size   map[*yaml.Node]int  // expanded size of each node walked, aliases followed
	open   map[*yaml.Node]bool // the nodes whose walk is under way (the path from the root)
	total  int                 // nodes repeated by aliases so far
	failed bool
}

// walk returns n's size with aliases expanded, at most MaxAliasNodes+1 (it
// only has to tell "over the budget"), counting each alias's expansion
// into b.total. Each node is walked once; an alias's target, which YAML
// puts before it, has its size already.
func (b *budget) walk(n *yaml.Node, depth int) int {
	if b.failed {
		return 0
	}
	if s, ok := b.size[n]; ok {
		return s
	}
	if depth > MaxDepth {
		b.fail(n, "this value is nested more than %d mappings or lists deep, the most a workflow may nest", MaxDepth)
		return 0
	}
	b.open[n] = true
	size := 1
	for _, c := range n.Content {
		if c.Kind != yaml.AliasNode {
			size = capAdd(size, b.walk(c, depth+1))
			continue
		}
		t := c.Alias
		if t == nil {
			continue // the decoder refuses unknown anchors; nothing to count
		}
		if b.open[t] {
			b.fail(c, "the alias *%s is inside the value its anchor names, which would repeat without end; YAML aliases may only name values that do not contain them", c.Value)
			return 0
		}
		e := b.walk(t, depth+1)
		b.total = capAdd(b.total, e)
		if b.failed {
			return 0
		}
		if b.total > MaxAliasNodes {
			b.fail(c, "with this alias *%s, YAML aliases and merge keys (<<) repeat more than %d nodes, the most a workflow may repeat; write the repeated part out, or nest fewer anchors", c.Value, MaxAliasNodes)
			return 0
		}
		size = capAdd(size, e)
	}
	delete(b.open, n)
	b.size[n] = size
	return size
}

func (b *budget) fail(n *yaml.Node, format string, args ...any) {
	b.failed = true
	b.p.errorf(n, format, args...)
}

// capAdd adds sizes, saturating at MaxAliasNodes+1 so that nothing
// overflows.
func capAdd(a, b int) int {
	if a+b > MaxAliasNodes+1 {
		return MaxAliasNodes + 1
	}
	return a + b
}

// checkSize refuses data over MaxFileSize.
func (p *parser) checkSize(data []byte) bool {
	if len(data) > MaxFileSize {
		p.errAt(1, 1, "the file is %d bytes, over the %s a workflow may be", len(data), FormatSize(MaxFileSize))
		return false
	}
	return true
}
