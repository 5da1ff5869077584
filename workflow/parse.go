package workflow

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Built-in defaults, used when neither a step nor the workflow's defaults
// set a value. docs/workflow.md documents them.
const (
	DefaultVCPU       = 1
	DefaultMemory     = 512 << 20 // bytes
	DefaultPIDs       = 256
	DefaultDisk       = 1 << 30 // bytes
	DefaultTimeoutMS  = 0       // no timeout
	DefaultBandwidth  = 0       // unlimited
	DefaultIORate     = 0       // unlimited, for ioRead and ioWrite
	DefaultIsolation  = IsolationAuto
	DefaultHypervisor = HypervisorQEMU
)

// Limits on values, so a typo cannot ask for something absurd.
const (
	MaxStepNameLen = 32 // step names become host, netns and cgroup names
	MaxVCPU        = 1024
	MaxPIDs        = 4194304 // the kernel's pid_max ceiling
	minSize        = 1 << 20 // memory and disk are at least 1MiB
	minIORate      = 1 << 10 // ioRead and ioWrite are at least 1KiB/s
	// MinDiskInodes and MaxDiskInodes bound diskInodes (ext4's inode
	// counts are 32-bit).
	MinDiskInodes = 1024
	MaxDiskInodes = 1<<32 - 1
)

// The keys each mapping accepts, in the order docs/workflow.md lists them.
var (
	workflowKeys  = []string{"apiVersion", "kind", "name", "nixpkgs", "microvm", "defaults", "inputs", "steps"}
	nixpkgsKeys   = []string{"ref", "narHash"}
	defaultsKeys  = []string{"resources", "network", "isolation", "hypervisor", "env"}
	inputKeys     = []string{"source", "sha256", "commit", "dest"}
	stepKeys      = []string{"name", "run", "packages", "env", "needs", "inputs", "outputs", "resources", "network", "isolation", "hypervisor", "deterministic"}
	resourcesKeys = []string{"vcpu", "memory", "pids", "disk", "diskInodes", "timeout", "bandwidth", "ioRead", "ioWrite"}
	networkKeys   = []string{"allow"}
	isolations    = []string{string(IsolationAuto), string(IsolationVM), string(IsolationNamespace)}
	hypervisors   = []string{string(HypervisorQEMU), string(HypervisorCloudHypervisor), string(HypervisorFirecracker)}
)

var (
	workflowNameRe = lazyRegexp(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	inputNameRe    = lazyRegexp(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	hex40Re        = lazyRegexp(`^[0-9a-f]{40}$`)
	hex64Re        = lazyRegexp(`^[0-9a-f]{64}$`)
	scpLikeRe      = lazyRegexp(`^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^/].*$`)
)

// ParseOption changes what Parse accepts.
type ParseOption func(*parser)

// AllowOutsideInputs(true) accepts file inputs whose source leaves the
// workflow file's directory ("../data.csv"). By default they are an error:
// the host reads file inputs with the caller's rights, so a workflow must
// not name files elsewhere on the machine unless the caller says so
// (apply --allow-outside-inputs). The fetcher also refuses sources that
// leave the directory through a symlink, which no parser can see.
func AllowOutsideInputs(allow bool) ParseOption {
	return func(p *parser) { p.allowOutside = allow }
}

// ParseFile reads and parses the workflow at path. It returns the file's
// bytes too, since records keep them.
func ParseFile(path string, opts ...ParseOption) (*Workflow, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read workflow: %w", err)
	}
	defer f.Close()
	// One byte over the limit is enough for Parse to refuse it.
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read workflow: %w", err)
	}
	w, err := Parse(path, data, opts...)
	if err != nil {
		return nil, data, err
	}
	return w, data, nil
}

// Parse parses and validates a workflow, and applies defaults. filename is
// used in error positions only. On failure the error is an *ErrorList with
// every problem found.
func Parse(filename string, data []byte, opts ...ParseOption) (w *Workflow, err error) {
	defer func() {
		if r := recover(); r != nil {
			w = nil
			err = &ErrorList{Errors: []*Error{{File: filename, Line: 1, Col: 1,
				Msg: fmt.Sprintf("internal error while checking this workflow; please report it as a bug, with the file (%v)", r)}}}
		}
	}()
	return parse(filename, data, opts...)
}

// parse is Parse without the panic guard, so the fuzz target sees panics.
func parse(filename string, data []byte, opts ...ParseOption) (*Workflow, error) {
	p := &parser{file: filename, declaredInputs: map[string]bool{}}
	for _, o := range opts {
		o(p)
	}
	var w *Workflow
	if p.checkSize(data) {
		if root := p.decode(data); root != nil {
			w = p.workflow(root)
		}
	}
	if len(p.errs.Errors) > 0 {
		p.finish()
		return nil, &p.errs
	}
	return w, nil
}

var yamlLineRe = lazyRegexp(`^yaml: line (\d+): (.*)$`)

// decode reads exactly one YAML document and returns its top node.
func (p *parser) decode(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errAt(1, 1, "the file is empty; a workflow starts with %q", "apiVersion: "+APIVersion)
		} else {
			p.yamlError(err)
		}
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.errorf(&extra, "a workflow file holds one YAML document; remove this second one (or the '---' before it)")
	} else if !errors.Is(err, io.EOF) {
		p.yamlError(err)
	}
	if len(doc.Content) == 0 {
		p.errAt(1, 1, "the file is empty; a workflow starts with %q", "apiVersion: "+APIVersion)
		return nil
	}
	if !p.checkBudget(&doc) {
		return nil
	}
	return doc.Content[0]
}

func (p *parser) yamlError(err error) {
	msg := err.Error()
	for _, line := range strings.Split(msg, "\n") {
		if m := yamlLineRe().FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			n, _ := strconv.Atoi(m[1])
			p.errAt(n, 1, "invalid YAML: %s", m[2])
			return
		}
	}
	p.errAt(1, 1, "invalid YAML: %s", strings.TrimPrefix(msg, "yaml: "))
}

// settings are what defaults and steps may both set; set flags tell a value
// given from one left out.
type settings struct {
	vcpu, memory, pids, disk, timeout, bandwidth optInt
	ioRead, ioWrite, diskInodes                  optInt
	netSet                                       bool
	allow                                        []string
	isolation                                    Isolation
	isoNode                                      *yaml.Node
	hypervisor                                   Hypervisor
	env                                          map[string]string
}

type optInt struct {
	v   int64
	set bool
}

func (o optInt) or(def int64) int64 {
	if o.set {
		return o.v
	}
	return def
}

type stepSpec struct {
	node         *yaml.Node
	name         string
	nameNode     *yaml.Node
	run          string
	packages     []string
	packagesNode *yaml.Node
	needs        []ref
	inputs       []ref
	outputs      []string
	// deterministic and detOutputs are the step's deterministic key: true,
	// or the outputs it lists.
	deterministic bool
	detOutputs    []string
	settings
}

func (p *parser) workflow(n *yaml.Node) *Workflow {
	n = resolve(n)
	f, ok := p.fieldsExt(n, "the workflow", workflowKeys, true)
	if !ok {
		return nil
	}
	w := &Workflow{}
	for _, k := range []string{"apiVersion", "kind", "name", "steps"} {
		if _, ok := f[k]; !ok {
			hint := ""
			switch k {
			case "apiVersion":
				hint = "; add apiVersion: " + APIVersion
			case "kind":
				hint = "; add kind: " + Kind
			case "name":
				hint = "; add name: my-workflow"
			case "steps":
				hint = "; add steps: with at least one {name, run}"
			}
			p.errorf(n, "the workflow has no %s%s", k, hint)
		}
	}
	if e, ok := f["apiVersion"]; ok {
		if s, ok := p.str(e.v, "apiVersion"); ok {
			if s != APIVersion {
				p.errorf(resolve(e.v), "apiVersion must be %q, not %q", APIVersion, s)
			}
			w.APIVersion = s
		}
	}
	if e, ok := f["kind"]; ok {
		if s, ok := p.str(e.v, "kind"); ok {
			if s != Kind {
				p.errorf(resolve(e.v), "kind must be %q, not %q", Kind, s)
			}
			w.Kind = s
		}
	}
	if e, ok := f["name"]; ok {
		if s, ok := p.str(e.v, "name"); ok {
			if !workflowNameRe().MatchString(s) {
				p.errorf(resolve(e.v), "workflow name %q must be 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", s)
			}
			w.Name = s
		}
	}
	if e, ok := f["nixpkgs"]; ok {
		w.Nixpkgs = p.nixpkgs(e.v)
	}
	if e, ok := f["microvm"]; ok {
		if _, nix := f["nixpkgs"]; !nix {
			p.errorf(e.k, "microvm pins microvm.nix, which builds VMs from nixpkgs; add nixpkgs: github:NixOS/nixpkgs/<40-hex commit> too")
		}
		if pin := p.pin(e.v, "microvm", microvmExample); pin != nil {
			m := Microvm(*pin)
			w.Microvm = &m
		}
	}
	if e, ok := f["inputs"]; ok {
		w.Inputs = p.inputs(e.v)
	}
	var defs settings
	if e, ok := f["defaults"]; ok {
		if df, ok := p.fields(e.v, "defaults", defaultsKeys); ok {
			p.settings(df, "defaults", &defs)
		}
	}
	var specs []*stepSpec
	if e, ok := f["steps"]; ok {
		items, ok := p.list(e.v, "steps", "[{name: build, run: make}]")
		if ok && len(items) == 0 {
			p.errorf(resolve(e.v), "steps must list at least one step")
		}
		for i, it := range items {
			if s := p.step(it, i); s != nil {
				specs = append(specs, s)
			}
		}
	}
	_, nixGiven := f["nixpkgs"]
	p.crossCheck(w, specs, &defs, nixGiven)
	w.Steps = make([]Step, 0, len(specs))
	for _, s := range specs {
		w.Steps = append(w.Steps, build(s, &defs))
	}
	if w.Inputs == nil {
		w.Inputs = []Input{}
	}
	return w
}

// nixpkgsExample and microvmExample are how each pin is written, for
// errors.
const (
	nixpkgsExample = "github:NixOS/nixpkgs/<40-hex commit>"
	microvmExample = "github:microvm-nix/microvm.nix/<40-hex commit>"
)

// nixpkgs reads a flake ref string or {ref, narHash}.
func (p *parser) nixpkgs(n *yaml.Node) *Nixpkgs {
	return p.pin(n, "nixpkgs", nixpkgsExample)
}

// pin reads the flake ref string or {ref, narHash} of the top-level key
// what (nixpkgs or microvm); example is how its ref is written.
func (p *parser) pin(n *yaml.Node, what, example string) *Nixpkgs {
	n = resolve(n)
	np := &Nixpkgs{}
	refNode := n
	switch n.Kind {
	case yaml.MappingNode:
		f, ok := p.fields(n, what, nixpkgsKeys)
		if !ok {
			return nil
		}
		e, ok := f["ref"]
		if !ok {
			p.errorf(n, "%s has no ref; add ref: %s", what, example)
			return nil
		}
		refNode = resolve(e.v)
		if h, ok := f["narHash"]; ok {
			if s, ok := p.str(h.v, what+" narHash"); ok {
				if b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "sha256-")); !strings.HasPrefix(s, "sha256-") || err != nil || len(b) != 32 {
					p.errorf(resolve(h.v), "%s narHash %q must be \"sha256-\" and 44 base64 characters, as `nix flake metadata` prints it", what, s)
				} else {
					np.NarHash = s
				}
			}
		}
	case yaml.ScalarNode:
	default:
		p.errorf(n, "%s must be a flake ref such as %s, or a mapping with ref and narHash, not %s", what, example, describe(n))
		return nil
	}
	ref, ok := p.str(refNode, what+" ref")
	if !ok {
		return nil
	}
	rev, err := flakeRevAs(ref, example)
	if err != nil {
		p.errorf(refNode, "%s ref %q %v", what, ref, err)
		return nil
	}
	np.Ref, np.Rev = ref, rev
	return np
}

// flakeRev returns the commit a flake ref is pinned to: the third path
// segment of github:/gitlab:/sourcehut: refs, or a rev= parameter.
func flakeRev(ref string) (string, error) { return flakeRevAs(ref, nixpkgsExample) }

// flakeRevAs is flakeRev with errors that show example.
func flakeRevAs(ref, example string) (string, error) {
	how := "write it like " + example
	if strings.TrimSpace(ref) != ref || ref == "" || strings.ContainsAny(ref, " \t\n") {
		return "", fmt.Errorf("is not a flake ref; %s", how)
	}
	base, query, _ := strings.Cut(ref, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", fmt.Errorf("has a malformed query; %s", how)
	}
	qrev := q.Get("rev")
	if qrev != "" && !hex40Re().MatchString(qrev) {
		return "", fmt.Errorf("has rev=%q, which is not a full 40-hex commit (lowercase)", qrev)
	}
	scheme, rest, ok := strings.Cut(base, ":")
	if !ok {
		return "", fmt.Errorf("is not pinned (a registry name resolves to whatever is current); %s", how)
	}
	switch scheme {
	case "github", "gitlab", "sourcehut":
		parts := strings.Split(rest, "/")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
			return "", fmt.Errorf("is not a %s:OWNER/REPO/COMMIT ref; %s", scheme, how)
		}
		if len(parts) == 3 {
			if hex40Re().MatchString(parts[2]) {
				if qrev != "" && qrev != parts[2] {
					return "", errors.New("names two different commits")
				}
				return parts[2], nil
			}
			if qrev == "" {
				return "", fmt.Errorf("is pinned to %q, a branch or tag that moves; %s", parts[2], how)
			}
		}
	}
	if qrev == "" {
		return "", fmt.Errorf("is not pinned to a commit; %s (or add ?rev=<40-hex commit>)", how)
	}
	return qrev, nil
}

// inputs reads the top-level inputs map, sorted by name.
func (p *parser) inputs(n *yaml.Node) []Input {
	ps, ok := p.pairs(n, "inputs", 0)
	if !ok {
		return nil
	}
	out := []Input{}
	dests := map[string]string{}
	for _, e := range ps {
		p.declaredInputs[e.key] = true
		if !inputNameRe().MatchString(e.key) {
			p.errorf(e.k, "input name %q must be 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", e.key)
			continue
		}
		in, ok := p.input(e.key, e.v)
		if !ok {
			continue
		}
		if other, dup := dests[in.Dest]; dup {
			p.errorf(e.k, "inputs %q and %q both have dest %q", other, in.Name, in.Dest)
			continue
		}
		dests[in.Dest] = in.Name
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	p.nestedDests(dests, ps)
	return out
}

// nestedDests reports each input whose dest lies inside another input's
// dest, naming the nearest such dest. dests maps each dest to its input.
// Sorted with '/' before every other byte, a dest's parents come before
// it and what lies inside it right after it, so one pass with a stack of
// the dests the current one lies in finds them all (in time linear in
// their length, however many nest).
func (p *parser) nestedDests(dests map[string]string, ps []pair) {
	keyNode := make(map[string]*yaml.Node, len(ps))
	for _, e := range ps {
		keyNode[e.key] = e.k
	}
	// Dests are cleaned relative paths without NUL bytes, so NUL can
	// stand for '/' when sorting.
	ds := make([]string, 0, len(dests))
	for d := range dests {
		ds = append(ds, strings.ReplaceAll(d, "/", "\x00"))
	}
	sort.Strings(ds)
	var stack []string // the dests the current one lies in, outermost first
	for _, k := range ds {
		d := strings.ReplaceAll(k, "\x00", "/")
		for len(stack) > 0 && !strings.HasPrefix(d, stack[len(stack)-1]+"/") {
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 {
			outer := stack[len(stack)-1]
			p.errorf(keyNode[dests[d]], "input %q has dest %q inside dest %q of input %q", dests[d], d, outer, dests[outer])
		}
		stack = append(stack, d)
	}
}

func (p *parser) input(name string, n *yaml.Node) (Input, bool) {
	what := fmt.Sprintf("input %q", name)
	in := Input{Name: name, Dest: name}
	f, ok := p.fields(n, what, inputKeys)
	if !ok {
		return in, false
	}
	e, ok := f["source"]
	if !ok {
		p.errorf(resolve(n), "%s has no source; add source: a relative path, git::URL or https:// URL", what)
		return in, false
	}
	src, ok := p.str(e.v, what+" source")
	if !ok {
		return in, false
	}
	kind, clean, err := classifySource(src)
	if err != nil {
		p.errorf(resolve(e.v), "%s source %q %v", what, src, err)
		ok = false
	} else if kind == InputFile && !p.allowOutside && (clean == ".." || strings.HasPrefix(clean, "../")) {
		p.errorf(resolve(e.v), "%s source %q leaves the workflow's directory; move it next to the workflow, or pass --allow-outside-inputs", what, src)
		ok = false
	}
	in.Kind, in.Source = kind, clean
	if h, has := f["sha256"]; has {
		if s, good := p.str(h.v, what+" sha256"); good {
			s = strings.ToLower(s)
			switch {
			case kind == InputGit:
				p.errorf(resolve(h.v), "%s is a git source: pin it with commit, not sha256", what)
				ok = false
			case !hex64Re().MatchString(s):
				p.errorf(resolve(h.v), "%s sha256 must be 64 hex digits, as sha256sum prints them", what)
				ok = false
			}
			in.SHA256 = s
		} else {
			ok = false
		}
	}
	if c, has := f["commit"]; has {
		if s, good := p.str(c.v, what+" commit"); good {
			s = strings.ToLower(s)
			switch {
			case kind != InputGit && err == nil:
				p.errorf(resolve(c.v), "%s: commit applies only to git:: sources; pin files and URLs with sha256", what)
				ok = false
			case !hex40Re().MatchString(s):
				p.errorf(resolve(c.v), "%s commit must be a full 40-hex git commit", what)
				ok = false
			}
			in.Commit = s
		} else {
			ok = false
		}
	}
	if d, has := f["dest"]; has {
		if s, good := p.str(d.v, what+" dest"); good {
			if c, err := cleanRelPath(s); err != nil {
				p.errorf(resolve(d.v), "%s dest %q %v", what, s, err)
				ok = false
			} else {
				in.Dest = c
			}
		} else {
			ok = false
		}
	}
	return in, ok
}

// classifySource tells a local path from a git:: or http(s) URL.
func classifySource(src string) (InputKind, string, error) {
	if src == "" {
		return "", "", errors.New("is empty")
	}
	if rest, ok := strings.CutPrefix(src, "git::"); ok {
		if u, err := url.Parse(rest); err == nil && u.Scheme != "" && (u.Host != "" || u.Scheme == "file") {
			switch u.Scheme {
			case "https", "http", "ssh", "git", "file":
			default:
				return "", "", fmt.Errorf("has an unsupported git URL scheme %q", u.Scheme)
			}
			if q := u.Query(); q.Has("ref") || q.Has("rev") {
				return "", "", errors.New("pins a ref in the URL; pin the commit with commit: instead")
			}
			return InputGit, src, nil
		}
		if scpLikeRe().MatchString(rest) {
			return InputGit, src, nil
		}
		return "", "", errors.New("is not a git URL; write git::https://HOST/REPO.git")
	}
	if i := strings.Index(src, "::"); i > 0 && !strings.Contains(src[:i], "/") {
		return "", "", fmt.Errorf("uses the unsupported getter %q; use a relative path, git::URL or https:// URL", src[:i])
	}
	if strings.Contains(src, "://") {
		u, err := url.Parse(src)
		if err != nil || u.Host == "" {
			return "", "", errors.New("is not a valid URL")
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return "", "", fmt.Errorf("has the unsupported scheme %q; use a relative path, git::URL or https:// URL", u.Scheme)
		}
		return InputHTTP, src, nil
	}
	if strings.HasPrefix(src, "/") {
		return "", "", errors.New("is absolute; local sources are relative to the workflow file's directory")
	}
	if strings.ContainsRune(src, 0) {
		return "", "", errors.New("contains a NUL byte")
	}
	return InputFile, path.Clean(src), nil
}

// cleanRelPath checks a workspace-relative path and cleans it.
func cleanRelPath(s string) (string, error) {
	switch {
	case s == "":
		return "", errors.New("is empty")
	case strings.ContainsRune(s, 0):
		return "", errors.New("contains a NUL byte")
	case strings.HasPrefix(s, "/"):
		return "", errors.New("is absolute; write it relative to the workspace")
	}
	c := path.Clean(s)
	switch {
	case c == "..", strings.HasPrefix(c, "../"):
		return "", errors.New("escapes the workspace with ..")
	case c == ".":
		return "", errors.New("names the whole workspace; name a file or directory in it")
	}
	return c, nil
}

// settings reads the keys defaults and steps share.
func (p *parser) settings(f map[string]pair, what string, s *settings) {
	if e, ok := f["resources"]; ok {
		p.resources(e.v, what+" resources", s)
	}
	if e, ok := f["network"]; ok {
		p.network(e.v, what+" network", s)
	}
	if e, ok := f["isolation"]; ok {
		if v, ok := p.enum(e.v, what+" isolation", isolations); ok {
			s.isolation, s.isoNode = Isolation(v), resolve(e.v)
		}
	}
	if e, ok := f["hypervisor"]; ok {
		if v, ok := p.enum(e.v, what+" hypervisor", hypervisors); ok {
			s.hypervisor = Hypervisor(v)
		}
	}
	if e, ok := f["env"]; ok {
		s.env = p.env(e.v, what+" env")
	}
}

func (p *parser) enum(n *yaml.Node, what string, values []string) (string, bool) {
	s, ok := p.str(n, what)
	if !ok {
		return "", false
	}
	if !contains(values, s) {
		p.errorf(resolve(n), "%s %q is not one of %s%s", what, s, quoteList(values), p.suggest(s, values))
		return "", false
	}
	return s, true
}

func (p *parser) env(n *yaml.Node, what string) map[string]string {
	ps, ok := p.pairs(n, what, 0)
	if !ok {
		return nil
	}
	m := make(map[string]string, len(ps))
	for _, e := range ps {
		if !isEnvName(e.key) {
			p.errorf(e.k, "%s: %q is not a variable name (letters, digits and '_', not starting with a digit)", what, e.key)
			continue
		}
		v := resolve(e.v)
		if v.Kind != yaml.ScalarNode || isNull(v) {
			hint := ""
			if isNull(v) {
				hint = fmt.Sprintf(" (write %s: \"\" for an empty value)", e.key)
			}
			p.errorf(v, "%s: %s must be a string, not %s%s", what, e.key, describe(v), hint)
			continue
		}
		m[e.key] = v.Value
	}
	return m
}

func (p *parser) resources(n *yaml.Node, what string, s *settings) {
	f, ok := p.fields(n, what, resourcesKeys)
	if !ok {
		return
	}
	if e, ok := f["vcpu"]; ok {
		if v, ok := p.integer(e.v, what+" vcpu", 1, MaxVCPU); ok {
			s.vcpu = optInt{v, true}
		}
	}
	if e, ok := f["pids"]; ok {
		if v, ok := p.integer(e.v, what+" pids", 1, MaxPIDs); ok {
			s.pids = optInt{v, true}
		}
	}
	if e, ok := f["diskInodes"]; ok {
		if v, ok := p.integer(e.v, what+" diskInodes", MinDiskInodes, MaxDiskInodes); ok {
			s.diskInodes = optInt{v, true}
		}
	}
	quantity := func(key string, parse func(string) (int64, error), min int64, minText, none string) optInt {
		e, ok := f[key]
		if !ok {
			return optInt{}
		}
		v := resolve(e.v)
		if v.Kind == yaml.ScalarNode && (v.ShortTag() == "!!int" || v.ShortTag() == "!!float") {
			_, err := parse(v.Value)
			p.errorf(v, "%s %v", what+" "+key, err)
			return optInt{}
		}
		str, ok := p.str(v, what+" "+key)
		if !ok {
			return optInt{}
		}
		if none != "" && str == none {
			return optInt{0, true}
		}
		x, err := parse(str)
		if err != nil {
			p.errorf(v, "%s %v", what+" "+key, err)
			return optInt{}
		}
		if x < min {
			p.errorf(v, "%s %q is less than the minimum of %s", what+" "+key, str, minText)
			return optInt{}
		}
		return optInt{x, true}
	}
	s.memory = quantity("memory", ParseSize, minSize, FormatSize(minSize), "")
	s.disk = quantity("disk", ParseSize, minSize, FormatSize(minSize), "")
	s.timeout = quantity("timeout", ParseTimeout, 0, "", "none")
	s.bandwidth = quantity("bandwidth", ParseBandwidth, 1, FormatBandwidth(1), "unlimited")
	s.ioRead = quantity("ioRead", ParseIORate, minIORate, FormatIORate(minIORate)+" (write unlimited for no limit)", "unlimited")
	s.ioWrite = quantity("ioWrite", ParseIORate, minIORate, FormatIORate(minIORate)+" (write unlimited for no limit)", "unlimited")
}

func (p *parser) network(n *yaml.Node, what string, s *settings) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" && n.Value == "none" {
		s.netSet, s.allow = true, nil
		return
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s must be \"none\" or a mapping such as {allow: [\"example.com:443\"]}, not %s", what, describe(n))
		return
	}
	f, ok := p.fields(n, what, networkKeys)
	if !ok {
		return
	}
	s.netSet = true
	if e, ok := f["allow"]; ok {
		for _, r := range p.strList(e.v, what+" allow", `["example.com:443", "10.0.0.0/8:5432"]`, func(v string, node *yaml.Node) (string, bool) {
			c, err := normalizeAllow(v)
			if err != nil {
				p.errorf(node, "%s entry %q: %v", what+" allow", v, err)
				return "", false
			}
			return c, true
		}) {
			s.allow = append(s.allow, r.name)
		}
	}
}

func (p *parser) step(n *yaml.Node, index int) *stepSpec {
	n = resolve(n)
	what := fmt.Sprintf("steps[%d]", index)
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s must be a mapping with name and run, not %s", what, describe(n))
		return nil
	}
	s := &stepSpec{node: n}
	// Peek at the name first so every message can name the step.
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k.Kind == yaml.ScalarNode && k.Value == "name" && v.Kind == yaml.ScalarNode && isStepName(v.Value) {
			what = fmt.Sprintf("step %q", v.Value)
		}
	}
	f, _ := p.fields(n, what, stepKeys)
	if e, ok := f["name"]; ok {
		if name, ok := p.str(e.v, what+" name"); ok {
			s.name, s.nameNode = name, resolve(e.v)
			if !isStepName(name) {
				p.errorf(s.nameNode, "step name %q cannot be a host name: use lowercase letters, digits and '-', start with a letter, end with a letter or digit, at most %d characters", name, MaxStepNameLen)
			}
		}
	}
	if _, ok := f["name"]; !ok {
		p.errorf(n, "%s has no name", what)
	}
	if e, ok := f["run"]; ok {
		if run, ok := p.str(e.v, what+" run"); ok {
			if strings.TrimSpace(run) == "" {
				p.errorf(resolve(e.v), "%s has an empty run; give it a shell script", what)
			}
			s.run = run
		}
	} else {
		p.errorf(n, "%s has no run; give it a shell script", what)
	}
	if e, ok := f["packages"]; ok {
		s.packagesNode = resolve(e.v)
		for _, r := range p.strList(e.v, what+" packages", "[python3, python3Packages.numpy]", func(v string, node *yaml.Node) (string, bool) {
			if len(v) > 256 || !isAttrPath(v) {
				p.errorf(node, "%s: %q is not a nixpkgs attribute path (names of letters, digits, '_' and '-' joined by '.', such as python3Packages.numpy)", what, v)
				return "", false
			}
			return v, true
		}) {
			s.packages = append(s.packages, r.name)
		}
	}
	if e, ok := f["needs"]; ok {
		s.needs = p.strList(e.v, what+" needs", "[build, test]", nil)
	}
	if e, ok := f["inputs"]; ok {
		s.inputs = p.strList(e.v, what+" inputs", "[dataset]", nil)
	}
	if e, ok := f["outputs"]; ok {
		refs := p.strList(e.v, what+" outputs", "[results/, model.bin]", func(v string, node *yaml.Node) (string, bool) {
			c, err := cleanRelPath(v)
			if err != nil {
				p.errorf(node, "%s output %q %v", what, v, err)
				return "", false
			}
			return c, true
		})
		for _, r := range refs {
			s.outputs = append(s.outputs, r.name)
		}
		// An output is the whole tree beneath it: one inside another is
		// stored twice, and restoring both (records export, a step that
		// needs them) would write the inner one through the outer.
		sorted := append([]ref(nil), refs...)
		sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
		for i := range sorted {
			for j := i + 1; j < len(sorted) && strings.HasPrefix(sorted[j].name, sorted[i].name); j++ {
				if strings.HasPrefix(sorted[j].name, sorted[i].name+"/") {
					p.errorf(sorted[j].node, "%s output %q lies inside its output %q: an output keeps the whole tree beneath it, so list only %q", what, sorted[j].name, sorted[i].name, sorted[i].name)
				}
			}
		}
	}
	if e, ok := f["deterministic"]; ok {
		p.deterministic(e.v, what, s)
	}
	p.settings(f, what, &s.settings)
	return s
}

// deterministic reads a step's deterministic key: true or false, or a
// list of the step's outputs (only those must be reproduced).
func (p *parser) deterministic(n *yaml.Node, what string, s *stepSpec) {
	n = resolve(n)
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool":
		s.deterministic = n.Value == "true" || n.Value == "True" || n.Value == "TRUE"
		return
	case n.Kind != yaml.SequenceNode:
		p.errorf(n, "%s deterministic must be true, false or a list of the step's outputs such as [report.txt], not %s", what, describe(n))
		return
	case len(n.Content) == 0:
		p.errorf(n, "%s deterministic lists no outputs; write deterministic: true for all of them", what)
		return
	}
	s.deterministic = true
	for _, r := range p.strList(n, what+" deterministic", "[report.txt]", func(v string, node *yaml.Node) (string, bool) {
		c, err := cleanRelPath(v)
		if err != nil {
			p.errorf(node, "%s deterministic output %q %v", what, v, err)
			return "", false
		}
		if !contains(s.outputs, c) {
			if len(s.outputs) == 0 {
				p.errorf(node, "%s deterministic names %q, but the step declares no outputs; add it to outputs", what, v)
			} else {
				p.errorf(node, "%s deterministic names %q, which is not one of its outputs %s", what, v, quoteList(s.outputs))
			}
			return "", false
		}
		return c, true
	}) {
		s.detOutputs = append(s.detOutputs, r.name)
	}
}

// isStepName reports whether s is a DNS label that starts with a letter and
// is at most MaxStepNameLen long.
func isStepName(s string) bool {
	return isDNSLabel(s, MaxStepNameLen) && s[0] >= 'a' && s[0] <= 'z'
}

// isEnvName reports whether s matches [A-Za-z_][A-Za-z0-9_]*.
func isEnvName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

// isAttrPath reports whether s is dot-separated names matching
// [A-Za-z_][A-Za-z0-9_-]*: a nixpkgs attribute path nixgen can splice into
// Nix without quoting.
func isAttrPath(s string) bool {
	for _, seg := range strings.Split(s, ".") {
		if seg == "" || seg[0] == '-' || seg[0] >= '0' && seg[0] <= '9' {
			return false
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !(c == '_' || c == '-' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
				return false
			}
		}
	}
	return true
}
