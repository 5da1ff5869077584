package policy

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentsandbox/agentsandbox/egress"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"go.yaml.in/yaml/v3"
)

//go:embed default.rego
var defaultPolicy []byte

//go:embed default_data.json
var defaultData []byte

// Names the embedded sources carry in the bundle digest and in errors.
const (
	DefaultPolicyName = "builtin/default.rego"
	defaultDataName   = "builtin/default_data.json"
)

// Package is the rego package whose deny and warn rules decide admission,
// together with every package below it (agentsandbox.team, ...).
const Package = "agentsandbox"

// Options says which policy sources Load reads.
type Options struct {
	// Dirs are policy folders; every *.rego below them is loaded, except
	// *_test.rego (those are for Test).
	Dirs []string
	// DataFiles are YAML or JSON documents merged over the default data, in
	// order: objects merge key by key, anything else replaces.
	DataFiles []string
	// NoDefault leaves out the embedded default policy and its data.
	NoDefault bool
}

// WorkflowPolicyDir is the folder of team rules that belongs to the workflow
// at workflowPath: <folder of the workflow>/.agentsandbox/policy. Callers add
// it to Options.Dirs when it exists.
func WorkflowPolicyDir(workflowPath string) string {
	return filepath.Join(filepath.Dir(workflowPath), ".agentsandbox", "policy")
}

// Engine is a compiled, prepared policy bundle. It is safe for concurrent
// Eval calls.
type Engine struct {
	query    rego.PreparedEvalQuery
	denyVars []string
	warnVars []string
	bundle   Digest
	policies []string
	// seccompAllow is data.agentsandbox.seccomp.allow (see SeccompAllow).
	seccompAllow map[string][]string
	// egressDeny is data.agentsandbox.egress_deny (see EgressDeny).
	egressDeny []string
	// apiInputs is data.agentsandbox.api_inputs (see APIInputs).
	apiInputs APIInputs
	// egressInternal is data.agentsandbox.egress_internal (see
	// EgressInternal), and internalRules the same parsed.
	egressInternal []string
	internalRules  []egress.Rule
	// actionQuery judges actions in sandboxes (action.go); nil when the
	// bundle has no deny_action rules.
	actionQuery *rego.PreparedEvalQuery
	actionVars  []string
}

// BundleDigest is the digest over the policy files and data Load read.
func (e *Engine) BundleDigest() Digest { return e.bundle }

// Policies lists the policy files in the bundle by their digest names,
// sorted: DefaultPolicyName and, for a user folder, paths relative to it.
func (e *Engine) Policies() []string { return slices.Clone(e.policies) }

// source is one policy file: name is how the bundle digest spells it (so the
// digest does not depend on where the folder is), file is the path errors
// point at.
type source struct {
	name    string
	file    string
	content []byte
}

// bundle is everything Load and Test read, before compiling.
type bundle struct {
	sources []source // policy modules, sorted by name
	tests   []source // *_test.rego, only when asked for
	data    map[string]any
	dataRaw []byte // canonical JSON of data
}

// Load reads, compiles and prepares the policy. Mistakes in the sources
// (rego, data, unreadable folders) come back as *SourceError.
//
// The sources are read every time, but a bundle this process has already
// compiled (same digest, same file paths for its messages) is not compiled
// again: Load returns the same *Engine, which is safe for concurrent use.
// A long-running process (the server) pays the compile once per bundle.
func Load(ctx context.Context, opts Options) (*Engine, error) {
	b, err := readBundle(opts, false)
	if err != nil {
		return nil, err
	}
	key := b.cacheKey()
	if e := engines.get(key); e != nil {
		return e, nil
	}
	e, err := compile(ctx, opts, b)
	if err != nil {
		return nil, err
	}
	engines.put(key, e)
	return e, nil
}

// engineCache holds compiled engines by bundle. It is bounded so a process
// that loads ever-new bundles does not grow without end.
type engineCache struct {
	mu sync.Mutex
	m  map[string]*Engine
}

const maxCachedEngines = 16

var engines = &engineCache{m: map[string]*Engine{}}

func (c *engineCache) get(key string) *Engine {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key]
}

func (c *engineCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
}

func (c *engineCache) put(key string, e *Engine) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCachedEngines {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[key] = e
}

// cacheKey is the bundle digest and the paths its files were read from
// (compile and evaluation errors name them), so a cached engine says the
// same as a fresh one would.
func (b *bundle) cacheKey() string {
	var sb strings.Builder
	sb.WriteString(b.digest().String())
	for _, s := range b.sources {
		sb.WriteString("\x00")
		sb.WriteString(s.file)
	}
	return sb.String()
}

// compile parses, compiles and prepares b.
func compile(ctx context.Context, opts Options, b *bundle) (*Engine, error) {
	caps := capabilities()
	modules, err := parseModules(b.sources, caps)
	if err != nil {
		return nil, err
	}
	compiler := ast.NewCompiler().
		WithCapabilities(caps).
		WithEnablePrintStatements(false).
		WithDefaultRegoVersion(ast.RegoV1)
	if compiler.Compile(modules); compiler.Failed() {
		return nil, sourceError(compiler.Errors)
	}

	denyRefs, warnRefs := decisionRefs(modules)
	if len(denyRefs) == 0 && len(warnRefs) == 0 {
		return nil, &SourceError{Problems: []string{fmt.Sprintf(
			"no deny or warn rule in package %s (or below it) in %s; write `deny contains msg if { ... }` rules or drop --no-default-policy",
			Package, strings.Join(opts.Dirs, ", "))}}
	}
	allow, err := seccompAllowData(b.data)
	if err != nil {
		return nil, err
	}
	deny, err := egressDenyData(b.data)
	if err != nil {
		return nil, err
	}
	api, err := apiInputsData(b.data)
	if err != nil {
		return nil, err
	}
	if err := checkHostCeilings(b.data); err != nil {
		return nil, err
	}
	internal, internalRules, err := egressInternalData(b.data)
	if err != nil {
		return nil, err
	}
	e := &Engine{bundle: b.digest(), policies: make([]string, 0, len(b.sources)), seccompAllow: allow, egressDeny: deny, apiInputs: api,
		egressInternal: internal, internalRules: internalRules}
	for _, s := range b.sources {
		e.policies = append(e.policies, s.name)
	}
	var q []string
	for i, r := range denyRefs {
		v := "deny" + strconv.Itoa(i)
		e.denyVars = append(e.denyVars, v)
		q = append(q, fmt.Sprintf("%s := {m | some m in %s}", v, r))
	}
	for i, r := range warnRefs {
		v := "warn" + strconv.Itoa(i)
		e.warnVars = append(e.warnVars, v)
		q = append(q, fmt.Sprintf("%s := {m | some m in %s}", v, r))
	}
	pq, err := rego.New(
		rego.Query(strings.Join(q, "; ")),
		rego.Compiler(compiler),
		rego.Store(inmem.NewFromObject(b.data)),
		rego.Capabilities(caps),
		rego.StrictBuiltinErrors(true),
	).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("prepare policy query: %w", sourceError(err))
	}
	e.query = pq
	if e.actionQuery, e.actionVars, err = prepareActions(ctx, compiler, b, modules, caps); err != nil {
		return nil, err
	}
	return e, nil
}

// egressDenyData reads data.agentsandbox.egress_deny: network entries
// (the forms network.allow takes) that no step may reach, whatever its
// network.allow says. Each must parse as an egress rule.
func egressDenyData(data map[string]any) ([]string, error) {
	const key = "data.agentsandbox.egress_deny"
	as, _ := data["agentsandbox"].(map[string]any)
	v, ok := as["egress_deny"]
	if !ok || v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, &SourceError{Problems: []string{fmt.Sprintf("policy data %s is %T, want a list of network entries such as [\"*.internal.example.com\", \"10.0.0.0/8\"]", key, v)}}
	}
	var out []string
	for _, x := range list {
		e, ok := x.(string)
		if !ok {
			return nil, &SourceError{Problems: []string{fmt.Sprintf("policy data %s holds %v, want network entries (strings)", key, x)}}
		}
		if _, err := egress.ParseRule(e); err != nil {
			return nil, &SourceError{Problems: []string{fmt.Sprintf("policy data %s: %v", key, err)}}
		}
		out = append(out, e)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// egressInternalData reads data.agentsandbox.egress_internal: the
// internal destinations (addresses and prefixes, with or without a port)
// that a step whose network.allow asks for them may reach. Loopback,
// link-local (cloud metadata), private ranges and the host's own
// addresses are opened by this list alone: no network.allow entry opens
// them. Each entry must parse as an address or prefix rule.
func egressInternalData(data map[string]any) ([]string, []egress.Rule, error) {
	const key = "data.agentsandbox.egress_internal"
	as, _ := data["agentsandbox"].(map[string]any)
	v, ok := as["egress_internal"]
	if !ok || v == nil {
		return nil, nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, nil, &SourceError{Problems: []string{fmt.Sprintf("policy data %s is %T, want a list of addresses or prefixes such as [\"169.254.169.254:80\", \"10.20.0.0/16:5432\"]", key, v)}}
	}
	var out []string
	for _, x := range list {
		e, ok := x.(string)
		if !ok {
			return nil, nil, &SourceError{Problems: []string{fmt.Sprintf("policy data %s holds %v, want addresses or prefixes (strings)", key, x)}}
		}
		r, err := egress.ParseInternal(e)
		if err != nil {
			return nil, nil, &SourceError{Problems: []string{err.Error()}}
		}
		out = append(out, r.Entry)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	rules := make([]egress.Rule, 0, len(out))
	for _, e := range out {
		r, _ := egress.ParseInternal(e)
		rules = append(rules, r)
	}
	return out, rules, nil
}

// seccompAllowData reads data.agentsandbox.seccomp.allow: an object from a
// step name, or "*" for every step, to the system calls that step's job may
// make beyond the jail's default seccomp filter. Which calls may be named
// at all is the runner's to say (vmrunner/seccomp.Relaxable); this only
// checks the shape. Absent, it is nil.
func seccompAllowData(data map[string]any) (map[string][]string, error) {
	const key = "data.agentsandbox.seccomp.allow"
	as, _ := data["agentsandbox"].(map[string]any)
	sc, ok := as["seccomp"]
	if !ok {
		return nil, nil
	}
	scm, ok := sc.(map[string]any)
	if !ok {
		return nil, &SourceError{Problems: []string{fmt.Sprintf("policy data data.agentsandbox.seccomp is %T, want an object such as {\"allow\": {\"*\": [\"perf_event_open\"]}}", sc)}}
	}
	allow, ok := scm["allow"]
	if !ok {
		return nil, nil
	}
	am, ok := allow.(map[string]any)
	if !ok {
		return nil, &SourceError{Problems: []string{fmt.Sprintf("policy data %s is %T, want an object from step names (or \"*\") to lists of system calls", key, allow)}}
	}
	out := map[string][]string{}
	for step, v := range am {
		list, ok := v.([]any)
		if !ok {
			return nil, &SourceError{Problems: []string{fmt.Sprintf("policy data %s[%q] is %T, want a list of system call names", key, step, v)}}
		}
		for _, n := range list {
			s, ok := n.(string)
			if !ok || s == "" {
				return nil, &SourceError{Problems: []string{fmt.Sprintf("policy data %s[%q] holds %v, want system call names", key, step, n)}}
			}
			out[step] = append(out[step], s)
		}
		slices.Sort(out[step])
		out[step] = slices.Compact(out[step])
	}
	return out, nil
}

// decisionRefs finds the deny and warn rules of package agentsandbox and the
// packages below it, as sorted refs such as "data.agentsandbox.deny".
func decisionRefs(modules map[string]*ast.Module) (deny, warn []string) {
	root := ast.MustParseRef("data." + Package)
	seen := map[string]bool{}
	for _, m := range modules {
		if !m.Package.Path.HasPrefix(root) {
			continue
		}
		for _, r := range m.Rules {
			ref := r.Ref().GroundPrefix()
			if len(ref) != len(m.Package.Path)+1 {
				continue
			}
			name, ok := ref[len(ref)-1].Value.(ast.String)
			if !ok || (name != "deny" && name != "warn") {
				continue
			}
			s := ref.String()
			if seen[s] {
				continue
			}
			seen[s] = true
			if name == "deny" {
				deny = append(deny, s)
			} else {
				warn = append(warn, s)
			}
		}
	}
	slices.Sort(deny)
	slices.Sort(warn)
	return deny, warn
}

// readBundle reads the sources opts names. With tests, *_test.rego files of
// the folders are read into b.tests.
func readBundle(opts Options, tests bool) (*bundle, error) {
	b := &bundle{}
	var problems []string
	if !opts.NoDefault {
		b.sources = append(b.sources, source{name: DefaultPolicyName, file: DefaultPolicyName, content: defaultPolicy})
	}
	seenDir := map[string]bool{}
	for _, dir := range opts.Dirs {
		abs, err := filepath.Abs(dir)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", dir, err))
			continue
		}
		if seenDir[abs] {
			continue
		}
		seenDir[abs] = true
		src, tst, err := readDir(dir, tests)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		b.sources = append(b.sources, src...)
		b.tests = append(b.tests, tst...)
	}

	docs := []map[string]any{}
	if !opts.NoDefault {
		d, err := decodeData(defaultDataName, defaultData)
		if err != nil {
			return nil, fmt.Errorf("embedded default data: %w", err)
		}
		docs = append(docs, d)
	}
	for _, f := range opts.DataFiles {
		raw, err := os.ReadFile(f)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: read policy data: %v", f, unwrapPathError(err)))
			continue
		}
		d, err := decodeData(f, raw)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		docs = append(docs, d)
	}
	if len(problems) > 0 {
		return nil, &SourceError{Problems: problems}
	}
	b.data = map[string]any{}
	for _, d := range docs {
		mergeInto(b.data, d)
	}
	raw, err := json.Marshal(b.data)
	if err != nil {
		return nil, fmt.Errorf("encode policy data: %w", err)
	}
	b.dataRaw = raw
	slices.SortFunc(b.sources, func(x, y source) int {
		return cmpSource(x, y)
	})
	return b, nil
}

func cmpSource(x, y source) int {
	if c := strings.Compare(x.name, y.name); c != 0 {
		return c
	}
	if c := bytes.Compare(x.content, y.content); c != 0 {
		return c
	}
	return strings.Compare(x.file, y.file)
}

// readDir reads the *.rego files below dir. Digest names are slash paths
// relative to dir.
func readDir(dir string, tests bool) (srcs, tsts []source, err error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: policy folder: %v", dir, unwrapPathError(err))
	}
	if !info.IsDir() {
		return nil, nil, fmt.Errorf("%s: policy folder: not a directory; --policy takes a folder of *.rego files", dir)
	}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".rego") {
			return nil
		}
		isTest := strings.HasSuffix(d.Name(), "_test.rego")
		if isTest && !tests {
			return nil
		}
		content, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		s := source{name: filepath.ToSlash(rel), file: path, content: content}
		if isTest {
			tsts = append(tsts, s)
		} else {
			srcs = append(srcs, s)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: read policy folder: %w", dir, err)
	}
	return srcs, tsts, nil
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// parseModules parses every source as rego v1 and collects all errors.
func parseModules(srcs []source, caps *ast.Capabilities) (map[string]*ast.Module, error) {
	modules := make(map[string]*ast.Module, len(srcs))
	var errs ast.Errors
	for _, s := range srcs {
		m, err := ast.ParseModuleWithOpts(s.file, string(s.content), ast.ParserOptions{
			RegoVersion:       ast.RegoV1,
			Capabilities:      caps,
			ProcessAnnotation: true,
		})
		if err != nil {
			var e ast.Errors
			if errors.As(err, &e) {
				errs = append(errs, e...)
				continue
			}
			return nil, &SourceError{Problems: []string{fmt.Sprintf("%s: %v", s.file, err)}}
		}
		if m == nil {
			errs = append(errs, ast.NewError(ast.ParseErr, &ast.Location{File: s.file, Row: 1, Col: 1}, "empty module: a policy file needs a package declaration"))
			continue
		}
		modules[s.file] = m
	}
	if len(errs) > 0 {
		return nil, sourceError(errs)
	}
	return modules, nil
}

// decodeData reads a YAML or JSON document whose top level is an object into
// JSON values (numbers as json.Number, so big integers stay exact).
func decodeData(name string, raw []byte) (map[string]any, error) {
	var js []byte
	if strings.HasSuffix(name, ".json") {
		js = raw
	} else {
		var v any
		if err := yaml.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("%s: decode policy data: %v", name, err)
		}
		var err error
		if js, err = json.Marshal(yamlToJSON(v)); err != nil {
			return nil, fmt.Errorf("%s: decode policy data: %v", name, err)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%s: decode policy data: %v", name, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: decode policy data: more than one JSON document", name)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: policy data must be an object at the top level, such as {\"agentsandbox\": {...}}", name)
	}
	return m, nil
}

// yamlToJSON makes the values yaml.v3 decodes encodable as JSON (maps with
// non-string keys become string-keyed).
func yamlToJSON(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = yamlToJSON(x)
		}
		return t
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[fmt.Sprint(k)] = yamlToJSON(x)
		}
		return m
	case []any:
		for i, x := range t {
			t[i] = yamlToJSON(x)
		}
		return t
	default:
		return v
	}
}

// mergeInto merges src over dst: objects key by key, anything else replaces.
func mergeInto(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				mergeInto(dm, sm)
				continue
			}
			c := map[string]any{}
			mergeInto(c, sm)
			dst[k] = c
			continue
		}
		dst[k] = v
	}
}

// digest is sha256 over "agentsandbox policy bundle\n", then for each policy
// file in name order "file <name>\n<length>\n<content>\n", then
// "data\n<length>\n<canonical data JSON>\n". Test files are not part of it.
func (b *bundle) digest() Digest {
	h := sha256.New()
	h.Write([]byte("agentsandbox policy bundle\n"))
	for _, s := range b.sources {
		fmt.Fprintf(h, "file %s\n%d\n", s.name, len(s.content))
		h.Write(s.content)
		h.Write([]byte("\n"))
	}
	fmt.Fprintf(h, "data\n%d\n", len(b.dataRaw))
	h.Write(b.dataRaw)
	h.Write([]byte("\n"))
	var d Digest
	h.Sum(d[:0])
	return d
}

// store returns an in-memory store holding the bundle's data.
func (b *bundle) store() storage.Store { return inmem.NewFromObject(b.data) }
