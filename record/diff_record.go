package record

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// RecordDiff is how run B differs from run A (docs/records.md, "Comparing
// runs"). Every section lists only what differs.
//
// What a run measured (wall times, CPU time, peak memory, pids, bytes sent
// and received) differs between any two runs, so it is kept apart: it is
// listed in Measured (per run and per step) with its delta, and does not
// make two runs differ. Everything else (what ran, on what, with which
// inputs, how it ended and what it produced) does.
type RecordDiff struct {
	A ID `json:"a"`
	B ID `json:"b"`
	// ParentA and ParentB are the runs A and B re-ran, if any. Where a run
	// came from is not what it did: they never make runs differ.
	ParentA *ID `json:"parentA,omitempty"`
	ParentB *ID `json:"parentB,omitempty"`
	// Identical is true when nothing but measurements differs.
	Identical bool `json:"identical"`

	// Run: the tool version, status, error and sandbox id.
	Run      []Change      `json:"run,omitempty"`
	Workflow *WorkflowDiff `json:"workflow,omitempty"`
	Policy   *PolicyDiff   `json:"policy,omitempty"`
	Inputs   []InputDiff   `json:"inputs,omitempty"`
	Host     []Change      `json:"host,omitempty"`
	Steps    []StepDiff    `json:"steps,omitempty"`
	Measured []Measurement `json:"measured,omitempty"`
	// Notes say what could not be compared (a blob not in this store).
	Notes []string `json:"notes,omitempty"`
}

// Change is one field whose value differs. A and B are JSON values
// (string, number, bool, or null for absent); digests and hashes are
// their string forms.
type Change struct {
	Field string `json:"field"`
	A     any    `json:"a"`
	B     any    `json:"b"`
}

// Measurement is one measured number of both runs and B minus A. Unit is
// "ms", "ns" or "bytes", or empty for a count.
type Measurement struct {
	Field string `json:"field"`
	A     int64  `json:"a"`
	B     int64  `json:"b"`
	Delta int64  `json:"delta"`
	Unit  string `json:"unit,omitempty"`
}

// WorkflowDiff is how the workflow files differ. Fields is filled by
// Store.DiffRecords when both files' bytes are in the store.
type WorkflowDiff struct {
	// Changes: name, fileDigest, canonicalHash.
	Changes []Change `json:"changes"`
	// Fields are the changed field paths of the YAML, such as
	// "steps.train.resources.memory": lists of mappings that all have a
	// name are keyed by it, other lists by index ("outputs[1]").
	Fields []FieldChange `json:"fields,omitempty"`
}

// FieldChange is one path of the workflow YAML that was added, removed
// or changed; A and B are its values (absent on the side without it).
type FieldChange struct {
	Path   string `json:"path"`
	Change string `json:"change"` // added, removed, changed
	A      any    `json:"a,omitempty"`
	B      any    `json:"b,omitempty"`
}

// PolicyDiff is how the admission decisions differ.
type PolicyDiff struct {
	// Changes: evaluated (a policy ran at all), bundleDigest, decisionId,
	// inputDigest, allowed.
	Changes     []Change `json:"changes,omitempty"`
	DenyAdded   []string `json:"denyAdded,omitempty"`
	DenyRemoved []string `json:"denyRemoved,omitempty"`
	WarnAdded   []string `json:"warnAdded,omitempty"`
	WarnRemoved []string `json:"warnRemoved,omitempty"`
}

// InputDiff is one workflow input added, removed or changed (any of its
// fields: source, commit, format, digest, size). A and B are the input as
// each run fetched it.
type InputDiff struct {
	Name   string `json:"name"`
	Change string `json:"change"` // added, removed, changed
	A      *Input `json:"a,omitempty"`
	B      *Input `json:"b,omitempty"`
}

// StepDiff is one step added, removed or changed. An added or removed step
// carries nothing more; a changed one lists what differs. A step whose
// measurements alone differ is listed as unchanged, with them.
type StepDiff struct {
	Name   string `json:"name"`
	Change string `json:"change"` // added, removed, changed, unchanged

	// Fields: isolation, hypervisor, accel, environment, hostRoot,
	// seccomp, jobDigest, status, exitCode, signal, timedOut, oom,
	// detail, inputs.NAME, logs.stdout, logs.stderr, logs.console, and
	// with egress network.allow, network.deny, network.bandwidthBps,
	// network.allowed, .denied, .failed, .queries, .nxdomain,
	// .droppedPackets.
	Fields   []Change       `json:"fields,omitempty"`
	Closure  *ClosureDiff   `json:"closure,omitempty"`
	Outputs  []OutputChange `json:"outputs,omitempty"`
	Measured []Measurement  `json:"measured,omitempty"`
}

// ClosureDiff is how a step's closures differ: store paths only in B
// (Added), only in A (Removed), and in both with different NAR hashes.
type ClosureDiff struct {
	Added   []StorePath     `json:"added,omitempty"`
	Removed []StorePath     `json:"removed,omitempty"`
	Changed []NarHashChange `json:"changed,omitempty"`
}

// NarHashChange is a store path whose NAR hash differs.
type NarHashChange struct {
	Path     string  `json:"path"`
	NarHashA NarHash `json:"narHashA"`
	NarHashB NarHash `json:"narHashB"`
}

// OutputChange is one declared output added, removed or changed. Files is
// the file-level comparison (Store.CompareOutputs), filled by
// Store.DiffRecords when both NARs are in the store.
type OutputChange struct {
	Path     string      `json:"path"`
	Change   string      `json:"change"` // added, removed, changed
	NarHashA *NarHash    `json:"narHashA,omitempty"`
	NarHashB *NarHash    `json:"narHashB,omitempty"`
	NarSizeA int64       `json:"narSizeA,omitempty"`
	NarSizeB int64       `json:"narSizeB,omitempty"`
	Files    *OutputDiff `json:"files,omitempty"`
}

// Values of the Change field of InputDiff, StepDiff, OutputChange and
// FieldChange.
const (
	Added   = "added"
	Removed = "removed"
	Changed = "changed"
	// Unchanged is a step listed only for its measurements.
	Unchanged = "unchanged"
)

// Diff compares two records without a store: every section but the
// workflow's field paths and the outputs' files. Its A and B are the
// records' ids (zero for a record that does not encode).
func Diff(a, b *Record) RecordDiff {
	d := RecordDiff{}
	if raw, err := Encode(a); err == nil {
		d.A = IDOf(raw)
	}
	if raw, err := Encode(b); err == nil {
		d.B = IDOf(raw)
	}
	d.ParentA, d.ParentB = a.Parent, b.Parent
	var c changes
	c.cmp("toolVersion", a.ToolVersion, b.ToolVersion)
	c.cmp("status", string(a.Status), string(b.Status))
	c.cmp("error", a.Error, b.Error)
	c.cmp("sandbox", sandboxID(a.Sandbox), sandboxID(b.Sandbox))
	d.Run = c.list

	c = changes{}
	c.cmp("name", a.Workflow.Name, b.Workflow.Name)
	c.cmp("fileDigest", a.Workflow.FileDigest.String(), b.Workflow.FileDigest.String())
	c.cmp("canonicalHash", a.Workflow.CanonicalHash.String(), b.Workflow.CanonicalHash.String())
	if len(c.list) > 0 {
		d.Workflow = &WorkflowDiff{Changes: c.list}
	}

	d.Policy = diffPolicy(a.Policy, b.Policy)
	d.Inputs = diffInputs(a.Inputs, b.Inputs)

	c = changes{}
	c.cmp("kernel", a.Host.Kernel, b.Host.Kernel)
	c.cmp("arch", a.Host.Arch, b.Host.Arch)
	c.cmp("cgroupMode", a.Host.CgroupMode, b.Host.CgroupMode)
	c.cmp("kvmUsable", a.Host.KVMUsable, b.Host.KVMUsable)
	c.cmp("nix", a.Host.Nix, b.Host.Nix)
	d.Host = c.list

	d.Steps = diffSteps(a.Steps, b.Steps)
	d.Measured = measure(nil, "durationMs", a.Duration().Milliseconds(), b.Duration().Milliseconds(), "ms")
	if a.Policy != nil && b.Policy != nil {
		d.Measured = measure(d.Measured, "policy.evalTimeNs", a.Policy.EvalTimeNs, b.Policy.EvalTimeNs, "ns")
	}
	d.Identical = len(d.Run) == 0 && d.Workflow == nil && d.Policy == nil && len(d.Inputs) == 0 &&
		len(d.Host) == 0
	for _, st := range d.Steps {
		if st.Change != Unchanged {
			d.Identical = false
		}
	}
	return d
}

// changes collects Changes of fields that differ.
type changes struct{ list []Change }

func (c *changes) cmp(field string, a, b any) {
	if a != b {
		c.list = append(c.list, Change{Field: field, A: a, B: b})
	}
}

// opt makes an empty string absent (null).
func opt(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func optDigest(d *Digest) any {
	if d == nil {
		return nil
	}
	return d.String()
}

func sandboxID(s *Sandbox) any {
	if s == nil {
		return nil
	}
	return s.ID
}

func measure(list []Measurement, field string, a, b int64, unit string) []Measurement {
	if a == b {
		return list
	}
	return append(list, Measurement{Field: field, A: a, B: b, Delta: b - a, Unit: unit})
}

func diffPolicy(a, b *Policy) *PolicyDiff {
	if a == nil && b == nil {
		return nil
	}
	var c changes
	if a == nil || b == nil {
		c.cmp("evaluated", a != nil, b != nil)
		return &PolicyDiff{Changes: c.list}
	}
	c.cmp("bundleDigest", a.BundleDigest, b.BundleDigest)
	c.cmp("decisionId", a.DecisionID, b.DecisionID)
	c.cmp("inputDigest", a.InputDigest, b.InputDigest)
	c.cmp("allowed", a.Allowed, b.Allowed)
	p := &PolicyDiff{Changes: c.list}
	p.DenyAdded, p.DenyRemoved = setDiff(a.Deny, b.Deny)
	p.WarnAdded, p.WarnRemoved = setDiff(a.Warn, b.Warn)
	if len(p.Changes) == 0 && len(p.DenyAdded)+len(p.DenyRemoved)+len(p.WarnAdded)+len(p.WarnRemoved) == 0 {
		return nil
	}
	return p
}

// setDiff returns the strings only in b and only in a, sorted.
func setDiff(a, b []string) (added, removed []string) {
	for _, s := range b {
		if !slices.Contains(a, s) && !slices.Contains(added, s) {
			added = append(added, s)
		}
	}
	for _, s := range a {
		if !slices.Contains(b, s) && !slices.Contains(removed, s) {
			removed = append(removed, s)
		}
	}
	slices.Sort(added)
	slices.Sort(removed)
	return added, removed
}

func diffInputs(a, b []Input) []InputDiff {
	var out []InputDiff
	byName := func(l []Input) map[string]*Input {
		m := map[string]*Input{}
		for i := range l {
			m[l[i].Name] = &l[i]
		}
		return m
	}
	ma, mb := byName(a), byName(b)
	for _, name := range unionKeys(ma, mb) {
		ia, ib := ma[name], mb[name]
		switch {
		case ia == nil:
			out = append(out, InputDiff{Name: name, Change: Added, B: ib})
		case ib == nil:
			out = append(out, InputDiff{Name: name, Change: Removed, A: ia})
		case *ia != *ib:
			out = append(out, InputDiff{Name: name, Change: Changed, A: ia, B: ib})
		}
	}
	return out
}

func unionKeys[V any](a, b map[string]V) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func diffSteps(a, b []Step) []StepDiff {
	byName := func(l []Step) map[string]*Step {
		m := map[string]*Step{}
		for i := range l {
			m[l[i].Name] = &l[i]
		}
		return m
	}
	ma, mb := byName(a), byName(b)
	var out []StepDiff
	for _, name := range unionKeys(ma, mb) {
		sa, sb := ma[name], mb[name]
		switch {
		case sa == nil:
			out = append(out, StepDiff{Name: name, Change: Added})
		case sb == nil:
			out = append(out, StepDiff{Name: name, Change: Removed})
		default:
			sd := diffStep(sa, sb)
			if sd.Fields == nil && sd.Closure == nil && sd.Outputs == nil {
				if sd.Measured == nil {
					continue
				}
				sd.Change = Unchanged
			}
			out = append(out, sd)
		}
	}
	return out
}

func diffStep(a, b *Step) StepDiff {
	d := StepDiff{Name: a.Name, Change: Changed}
	var c changes
	c.cmp("isolation", a.Isolation, b.Isolation)
	c.cmp("hypervisor", opt(a.Hypervisor), opt(b.Hypervisor))
	c.cmp("accel", opt(a.Accel), opt(b.Accel))
	c.cmp("environment", optDigest(a.Environment), optDigest(b.Environment))
	c.cmp("hostRoot", optDigest(a.HostRoot), optDigest(b.HostRoot))
	c.cmp("seccomp", optDigest(a.Seccomp), optDigest(b.Seccomp))
	c.cmp("jobDigest", a.JobDigest.String(), b.JobDigest.String())
	c.cmp("status", string(a.Status), string(b.Status))
	c.cmp("exitCode", a.ExitCode, b.ExitCode)
	c.cmp("signal", opt(a.Signal), opt(b.Signal))
	c.cmp("timedOut", a.TimedOut, b.TimedOut)
	c.cmp("oom", a.OOM, b.OOM)
	c.cmp("detail", opt(a.Detail), opt(b.Detail))
	for _, name := range unionKeys(a.Inputs, b.Inputs) {
		da, oka := a.Inputs[name]
		db, okb := b.Inputs[name]
		var va, vb any
		if oka {
			va = da.String()
		}
		if okb {
			vb = db.String()
		}
		c.cmp("inputs."+name, va, vb)
	}
	c.cmp("logs.stdout", a.Logs.Stdout.String(), b.Logs.Stdout.String())
	c.cmp("logs.stderr", a.Logs.Stderr.String(), b.Logs.Stderr.String())
	c.cmp("logs.console", optDigest(a.Logs.Console), optDigest(b.Logs.Console))
	na, nb := a.Network, b.Network
	switch {
	case na == nil && nb == nil:
	case na == nil || nb == nil:
		c.cmp("network", na != nil, nb != nil)
	default:
		c.cmp("network.allow", strings.Join(na.Allow, " "), strings.Join(nb.Allow, " "))
		c.cmp("network.deny", strings.Join(na.Deny, " "), strings.Join(nb.Deny, " "))
		c.cmp("network.bandwidthBps", na.Bandwidth, nb.Bandwidth)
		c.cmp("network.allowed", na.Allowed, nb.Allowed)
		c.cmp("network.denied", na.Denied, nb.Denied)
		c.cmp("network.failed", na.Failed, nb.Failed)
		c.cmp("network.queries", na.Queries, nb.Queries)
		c.cmp("network.nxdomain", na.NXDomain, nb.NXDomain)
		c.cmp("network.droppedPackets", na.Dropped, nb.Dropped)
	}
	d.Fields = c.list
	d.Closure = diffClosure(a.Closure, b.Closure)
	d.Outputs = diffOutputs(a.Outputs, b.Outputs)

	var m []Measurement
	m = measure(m, "durationMs", a.Finished.Sub(a.Started).Milliseconds(), b.Finished.Sub(b.Started).Milliseconds(), "ms")
	m = measure(m, "usage.cpuTimeNs", a.Usage.CPUTimeNs, b.Usage.CPUTimeNs, "ns")
	m = measure(m, "usage.peakMemoryBytes", a.Usage.PeakMemoryBytes, b.Usage.PeakMemoryBytes, "bytes")
	m = measure(m, "usage.pidsPeak", a.Usage.PidsPeak, b.Usage.PidsPeak, "")
	m = measure(m, "usage.throttledNs", a.Usage.ThrottledNs, b.Usage.ThrottledNs, "ns")
	m = measure(m, "usage.oomKills", a.Usage.OOMKills, b.Usage.OOMKills, "")
	if na != nil && nb != nil {
		m = measure(m, "network.bytesOut", na.BytesOut, nb.BytesOut, "bytes")
		m = measure(m, "network.bytesIn", na.BytesIn, nb.BytesIn, "bytes")
	}
	d.Measured = m
	return d
}

func diffClosure(a, b []StorePath) *ClosureDiff {
	index := func(l []StorePath) map[string]StorePath {
		m := map[string]StorePath{}
		for _, p := range l {
			m[p.Path] = p
		}
		return m
	}
	ma, mb := index(a), index(b)
	d := &ClosureDiff{}
	for _, path := range unionKeys(ma, mb) {
		pa, oka := ma[path]
		pb, okb := mb[path]
		switch {
		case !oka:
			d.Added = append(d.Added, pb)
		case !okb:
			d.Removed = append(d.Removed, pa)
		case pa.NarHash != pb.NarHash:
			d.Changed = append(d.Changed, NarHashChange{Path: path, NarHashA: pa.NarHash, NarHashB: pb.NarHash})
		}
	}
	if d.Added == nil && d.Removed == nil && d.Changed == nil {
		return nil
	}
	return d
}

func diffOutputs(a, b []Output) []OutputChange {
	index := func(l []Output) map[string]Output {
		m := map[string]Output{}
		for _, o := range l {
			m[o.Path] = o
		}
		return m
	}
	ma, mb := index(a), index(b)
	var out []OutputChange
	for _, path := range unionKeys(ma, mb) {
		oa, oka := ma[path]
		ob, okb := mb[path]
		switch {
		case !oka:
			out = append(out, OutputChange{Path: path, Change: Added, NarHashB: &ob.NarHash, NarSizeB: ob.NarSize})
		case !okb:
			out = append(out, OutputChange{Path: path, Change: Removed, NarHashA: &oa.NarHash, NarSizeA: oa.NarSize})
		case oa.NarHash != ob.NarHash:
			out = append(out, OutputChange{Path: path, Change: Changed,
				NarHashA: &oa.NarHash, NarHashB: &ob.NarHash, NarSizeA: oa.NarSize, NarSizeB: ob.NarSize})
		}
	}
	return out
}

// DiffRecords compares records a and b (verified as they are read) like
// Diff, and reads what the records name from the store: the two workflow
// files, to list the changed YAML field paths, and each changed output's
// two NARs, to list the files that differ (CompareOutputs). A blob this
// store does not hold is a note in the result; a blob that fails its hash
// check, or does not parse, is an error.
func (s *Store) DiffRecords(a, b ID) (*RecordDiff, error) {
	ra, err := s.Get(a)
	if err != nil {
		return nil, fmt.Errorf("diff records: %w", err)
	}
	rb, err := s.Get(b)
	if err != nil {
		return nil, fmt.Errorf("diff records: %w", err)
	}
	d := Diff(ra, rb)
	d.A, d.B = a, b
	if w := d.Workflow; w != nil && ra.Workflow.FileDigest != rb.Workflow.FileDigest {
		fields, err := s.diffWorkflowFiles(ra.Workflow.FileDigest, rb.Workflow.FileDigest)
		switch {
		case errors.Is(err, ErrBlobMissing):
			d.Notes = append(d.Notes, fmt.Sprintf("workflow fields not compared: %v", err))
		case err != nil:
			return nil, fmt.Errorf("diff records %s and %s: %w", a, b, err)
		default:
			w.Fields = fields
		}
	}
	for i := range d.Steps {
		st := &d.Steps[i]
		for j := range st.Outputs {
			o := &st.Outputs[j]
			if o.Change != Changed {
				continue
			}
			files, err := s.CompareOutputs(*o.NarHashA, *o.NarHashB)
			switch {
			case errors.Is(err, ErrBlobMissing):
				d.Notes = append(d.Notes, fmt.Sprintf("step %s: output %s: files not compared: %v", st.Name, o.Path, err))
			case err != nil:
				return nil, fmt.Errorf("diff records %s and %s: step %s: output %s: %w", a, b, st.Name, o.Path, err)
			default:
				o.Files = &files
			}
		}
	}
	return &d, nil
}

// maxWorkflowBytes bounds a workflow file read back for comparison.
const maxWorkflowBytes = 4 << 20

func (s *Store) readWorkflow(d Digest) (any, error) {
	rc, err := s.OpenBlob(d)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	raw, err := io.ReadAll(io.LimitReader(rc, maxWorkflowBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read workflow file %s: %w", d, err)
	}
	if len(raw) > maxWorkflowBytes {
		return nil, fmt.Errorf("read workflow file %s: larger than %d bytes", d, maxWorkflowBytes)
	}
	// The limit stopped short of EOF only if the blob is too large; read
	// on so the verifying reader checks the hash.
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return nil, fmt.Errorf("read workflow file %s: %w", d, err)
	}
	var v any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("parse workflow file %s: %w", d, err)
	}
	return normalizeYAML(v), nil
}

func (s *Store) diffWorkflowFiles(a, b Digest) ([]FieldChange, error) {
	va, err := s.readWorkflow(a)
	if err != nil {
		return nil, err
	}
	vb, err := s.readWorkflow(b)
	if err != nil {
		return nil, err
	}
	return DiffYAML(va, vb), nil
}

// normalizeYAML turns mappings with keys that are not strings into
// map[string]any (keys printed), so every value is JSON.
func normalizeYAML(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = normalizeYAML(e)
		}
		return v
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = normalizeYAML(e)
		}
		return m
	case []any:
		for i, e := range v {
			v[i] = normalizeYAML(e)
		}
		return v
	case time.Time:
		return v.Format(time.RFC3339Nano)
	}
	return v
}

// DiffYAML lists the field paths where two decoded YAML documents differ,
// sorted by path. Mappings are compared key by key; a list whose elements
// are all mappings with distinct string "name" keys (steps, inputs) by
// name ("steps.train"), any other list by index ("outputs[1]").
func DiffYAML(a, b any) []FieldChange {
	var out []FieldChange
	diffYAML("", a, b, &out)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func joinPath(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// diffKeyed compares a mapping, or a list of named mappings keyed by
// name, key by key.
func diffKeyed(path string, a, b map[string]any, out *[]FieldChange) {
	for _, k := range unionKeys(a, b) {
		va, ina := a[k]
		vb, inb := b[k]
		p := joinPath(path, k)
		switch {
		case !ina:
			*out = append(*out, FieldChange{Path: p, Change: Added, B: vb})
		case !inb:
			*out = append(*out, FieldChange{Path: p, Change: Removed, A: va})
		default:
			diffYAML(p, va, vb, out)
		}
	}
}

func diffYAML(path string, a, b any, out *[]FieldChange) {
	ma, oka := a.(map[string]any)
	mb, okb := b.(map[string]any)
	if oka && okb {
		diffKeyed(path, ma, mb, out)
		return
	}
	la, oka := a.([]any)
	lb, okb := b.([]any)
	if oka && okb {
		na, namedA := byNameKey(la)
		nb, namedB := byNameKey(lb)
		if namedA && namedB {
			diffKeyed(path, na, nb, out)
			return
		}
		for i := 0; i < max(len(la), len(lb)); i++ {
			p := path + "[" + strconv.Itoa(i) + "]"
			switch {
			case i >= len(la):
				*out = append(*out, FieldChange{Path: p, Change: Added, B: lb[i]})
			case i >= len(lb):
				*out = append(*out, FieldChange{Path: p, Change: Removed, A: la[i]})
			default:
				diffYAML(p, la[i], lb[i], out)
			}
		}
		return
	}
	if !reflect.DeepEqual(a, b) {
		if path == "" {
			path = "."
		}
		*out = append(*out, FieldChange{Path: path, Change: Changed, A: a, B: b})
	}
}

// byNameKey indexes a list of mappings by their "name" values; ok is false
// unless every element is a mapping with a distinct string name (an empty
// list is both kinds).
func byNameKey(l []any) (map[string]any, bool) {
	m := make(map[string]any, len(l))
	for _, e := range l {
		em, ok := e.(map[string]any)
		if !ok {
			return nil, false
		}
		name, ok := em["name"].(string)
		if !ok || name == "" {
			return nil, false
		}
		if _, dup := m[name]; dup {
			return nil, false
		}
		m[name] = e
	}
	return m, true
}
