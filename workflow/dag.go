package workflow

import (
	"sort"
	"strings"
)

// crossCheck runs the checks that relate steps to each other, to inputs and
// to nixpkgs. nixGiven is whether the file has a nixpkgs key at all (an
// invalid one is reported once, not again by every step that needs it).
func (p *parser) crossCheck(w *Workflow, specs []*stepSpec, defs *settings, nixGiven bool) {
	byName := map[string]*stepSpec{}
	var names []string
	for _, s := range specs {
		if s.nameNode == nil {
			continue
		}
		if first, dup := byName[s.name]; dup {
			p.errorf(s.nameNode, "duplicate step name %q (first defined on line %d)", s.name, first.nameNode.Line)
			continue
		}
		byName[s.name] = s
		names = append(names, s.name)
	}
	var inputNames []string
	for n := range p.declaredInputs {
		inputNames = append(inputNames, n)
	}
	sort.Strings(inputNames)
	for _, s := range specs {
		label := "this step"
		if s.nameNode != nil {
			label = "step " + quote(s.name)
		}
		for _, r := range s.needs {
			if _, ok := byName[r.name]; !ok {
				p.errorf(r.node, "%s needs %q, which is not a step%s", label, r.name, p.suggest(r.name, names))
			}
		}
		for _, r := range s.inputs {
			if !p.declaredInputs[r.name] {
				if len(inputNames) == 0 {
					p.errorf(r.node, "%s uses input %q, but the workflow has no inputs section", label, r.name)
				} else {
					p.errorf(r.node, "%s uses input %q, which is not in inputs%s", label, r.name, p.suggest(r.name, inputNames))
				}
			}
		}
		if !nixGiven && len(s.packages) > 0 {
			p.errorf(s.packagesNode, "%s lists packages but the workflow pins no nixpkgs; add nixpkgs: github:NixOS/nixpkgs/<40-hex commit>", label)
		}
		if !nixGiven {
			iso, node := s.isolation, s.isoNode
			if iso == "" {
				iso, node = defs.isolation, defs.isoNode
			}
			if iso == IsolationVM {
				p.errorf(node, "isolation \"vm\" needs a pinned nixpkgs to build the VM from; add nixpkgs: github:NixOS/nixpkgs/<40-hex commit>, or use namespace or auto")
			}
		}
	}
	p.findCycles(specs, byName)
}

func quote(s string) string { return `"` + s + `"` }

// findCycles reports each cycle of needs once, at the need that closes it,
// spelled "a -> b -> a" (read "->" as "needs").
func (p *parser) findCycles(specs []*stepSpec, byName map[string]*stepSpec) {
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	reported := map[string]bool{}
	var visit func(s *stepSpec)
	visit = func(s *stepSpec) {
		color[s.name] = grey
		stack = append(stack, s.name)
		for _, r := range s.needs {
			next, ok := byName[r.name]
			if !ok {
				continue
			}
			switch color[next.name] {
			case white:
				visit(next)
			case grey:
				i := len(stack) - 1
				for stack[i] != next.name {
					i--
				}
				cycle := append(append([]string{}, stack[i:]...), next.name)
				key := cycleKey(cycle[:len(cycle)-1])
				if !reported[key] {
					reported[key] = true
					p.errorf(r.node, "cycle in needs: %s", strings.Join(cycle, " -> "))
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[s.name] = black
	}
	for _, s := range specs {
		if byName[s.name] == s && color[s.name] == white {
			visit(s)
		}
	}
}

// cycleKey names a cycle independently of where it is entered.
func cycleKey(c []string) string {
	start := 0
	for i := range c {
		if c[i] < c[start] {
			start = i
		}
	}
	return strings.Join(append(append([]string{}, c[start:]...), c[:start]...), "\x00")
}

// Waves returns the step names in dependency layers: every step of a wave
// needs only steps of earlier waves, so the steps of one wave may run in
// parallel. Names are sorted within a wave. For a workflow Parse accepted;
// steps caught in a cycle or needing a missing step are left out.
func (w *Workflow) Waves() [][]string {
	indeg := make(map[string]int, len(w.Steps))
	users := make(map[string][]string, len(w.Steps))
	for _, s := range w.Steps {
		indeg[s.Name] += 0
	}
	for _, s := range w.Steps {
		seen := map[string]bool{}
		for _, n := range s.Needs {
			if seen[n] {
				continue
			}
			seen[n] = true
			if _, ok := indeg[n]; !ok {
				indeg[s.Name] = -1 << 30 // needs a missing step: never ready
				continue
			}
			indeg[s.Name]++
			users[n] = append(users[n], s.Name)
		}
	}
	var wave []string
	for name, d := range indeg {
		if d == 0 {
			wave = append(wave, name)
		}
	}
	var waves [][]string
	for len(wave) > 0 {
		sort.Strings(wave)
		waves = append(waves, wave)
		var next []string
		for _, n := range wave {
			for _, u := range users[n] {
				if indeg[u]--; indeg[u] == 0 {
					next = append(next, u)
				}
			}
		}
		wave = next
	}
	return waves
}

// StepByName returns the step called name.
func (w *Workflow) StepByName(name string) (Step, bool) {
	for _, s := range w.Steps {
		if s.Name == name {
			return s, true
		}
	}
	return Step{}, false
}
