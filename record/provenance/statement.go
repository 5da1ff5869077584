package provenance

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	slsa "github.com/in-toto/attestation/go/predicates/provenance/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentsandbox/agentsandbox/record"
)

// The URIs the attestation is typed by.
const (
	// StatementType is the in-toto Statement version Build writes and
	// Verify accepts.
	StatementType = intoto.StatementTypeUri // "https://in-toto.io/Statement/v1"
	// PredicateType is SLSA provenance v1.
	PredicateType = "https://slsa.dev/provenance/v1"
	// BuildType names this package's layout of buildDefinition
	// (docs/provenance.md). A change that a consumer could misread bumps
	// its version.
	BuildType = "https://agentsandbox.dev/buildtypes/apply/v1"
	// BuilderIDPrefix is runDetails.builder.id before the tool version.
	BuilderIDPrefix = "https://agentsandbox.dev/builder/agentsandbox@"
)

// Digest set keys. DigestSHA256 is in-toto's sha256: lowercase hex of the
// sha256 of the bytes. DigestNAR is this project's: lowercase hex of the
// sha256 of the path's NAR serialisation, which is Nix's NAR hash
// (`nix hash path --base16`) and the key of the NAR's blob in the store.
const (
	DigestSHA256 = "sha256"
	DigestNAR    = "narSha256"
	// DigestGitCommit is a git input's commit (in-toto's gitCommit).
	DigestGitCommit = "gitCommit"
)

// Workflow is what the attestation says of the workflow file beyond what
// the record holds. The caller parses the file the record pins (its blob is
// Record.Workflow.FileDigest) and fills it; this package does not import
// package workflow, so its format never moves with it.
type Workflow struct {
	// Source is where the file came from, as the caller knows it (a URI
	// such as git+https://example.org/repo@REF#path); "" when unknown.
	// The file itself is pinned by digest either way.
	Source string
	// Steps are the workflow's steps as declared (before isolation is
	// resolved).
	Steps []Step
}

// Step is one step as the workflow asks for it.
type Step struct {
	Name string `json:"name"`
	// Isolation is the requested isolation: auto, vm or namespace.
	Isolation  string   `json:"isolation"`
	Hypervisor string   `json:"hypervisor,omitempty"`
	Limits     Limits   `json:"limits"`
	Network    []string `json:"networkAllow"`
	// EnvNames are the names of the step's environment variables; their
	// values are never in an attestation.
	EnvNames []string `json:"envNames"`
	Needs    []string `json:"needs"`
	Inputs   []string `json:"inputs"`
	Outputs  []string `json:"outputs"`
	Packages []string `json:"packages"`
}

// Limits are a step's hard quotas in the workflow's canonical units. Zero
// means unlimited (or, for DiskInodes, derived from DiskBytes).
type Limits struct {
	VCPU         int   `json:"vcpu"`
	MemoryBytes  int64 `json:"memoryBytes"`
	PIDs         int   `json:"pids"`
	DiskBytes    int64 `json:"diskBytes"`
	DiskInodes   int64 `json:"diskInodes,omitempty"`
	TimeoutMs    int64 `json:"timeoutMs,omitempty"`
	BandwidthBps int64 `json:"bandwidthBitsPerSecond,omitempty"`
	IOReadBps    int64 `json:"ioReadBytesPerSecond,omitempty"`
	IOWriteBps   int64 `json:"ioWriteBytesPerSecond,omitempty"`
}

// ErrNoSubjects is returned for a record with no outputs: a Statement
// needs at least one subject.
var ErrNoSubjects = errors.New("the record has no outputs, and an attestation needs at least one subject")

// Build makes the Statement for record id: subjects from the outputs'
// NARs, a SLSA provenance v1 predicate from the record and w (nil: the
// steps' requested parameters are left out). The record and every NAR are
// verified as they are read.
func Build(s *record.Store, id record.ID, w *Workflow) (*intoto.Statement, error) {
	r, err := s.Get(id)
	if err != nil {
		return nil, fmt.Errorf("attest record %s: %w", id, err)
	}
	subjects, problems := Subjects(s, r)
	if len(problems) > 0 {
		return nil, fmt.Errorf("attest record %s: %s: %w", id, problems[0].What, problems[0].Err)
	}
	if len(subjects) == 0 {
		return nil, fmt.Errorf("attest record %s: %w", id, ErrNoSubjects)
	}
	pred, err := predicate(id, r, w)
	if err != nil {
		return nil, fmt.Errorf("attest record %s: %w", id, err)
	}
	if err := pred.Validate(); err != nil {
		return nil, fmt.Errorf("attest record %s: invalid provenance: %w", id, err)
	}
	ps, err := toStruct(pred)
	if err != nil {
		return nil, fmt.Errorf("attest record %s: %w", id, err)
	}
	st := &intoto.Statement{
		Type:          StatementType,
		Subject:       subjects,
		PredicateType: PredicateType,
		Predicate:     ps,
	}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("attest record %s: invalid statement: %w", id, err)
	}
	return st, nil
}

// toStruct converts the provenance message into the Statement's predicate.
func toStruct(p *slsa.Provenance) (*structpb.Struct, error) {
	b, err := protojson.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode provenance: %w", err)
	}
	var out structpb.Struct
	if err := protojson.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("encode provenance: %w", err)
	}
	return &out, nil
}

// Marshal returns the Statement's canonical JSON, the DSSE payload: keys
// sorted, no insignificant whitespace, no HTML escaping, integers without
// exponents. (protojson's own output varies its whitespace on purpose.)
func Marshal(st *intoto.Statement) ([]byte, error) {
	b, err := protojson.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encode statement: %w", err)
	}
	return canonicalJSON(b)
}

// canonicalJSON re-encodes JSON with sorted keys and no whitespace.
// Numbers go through float64, which holds every integer an attestation
// carries (below 2^53) exactly.
func canonicalJSON(b []byte) ([]byte, error) {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// structOf turns a value that encoding/json can encode into a Struct.
func structOf(v any) (*structpb.Struct, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return structpb.NewStruct(m)
}

// BuilderID is runDetails.builder.id for a tool version.
func BuilderID(toolVersion string) string {
	return BuilderIDPrefix + url.PathEscape(toolVersion)
}

func sha256Set(d record.Digest) map[string]string {
	return map[string]string{DigestSHA256: d.Hex()}
}

func narSet(h record.NarHash) map[string]string {
	return map[string]string{DigestNAR: hex.EncodeToString(h[:])}
}

// externalParameters are what the run was asked to do.
type externalParameters struct {
	Workflow      workflowParams `json:"workflow"`
	SelectedSteps []string       `json:"selectedSteps"`
	Inputs        []inputParams  `json:"inputs"`
	Steps         []Step         `json:"steps,omitempty"`
}

type workflowParams struct {
	Name          string `json:"name"`
	FileDigest    string `json:"fileDigest"`
	CanonicalHash string `json:"canonicalHash"`
	Source        string `json:"source,omitempty"`
}

type inputParams struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	Source string `json:"source"`
	Commit string `json:"commit,omitempty"`
	Format string `json:"format"`
	Digest string `json:"digest"`
}

// internalParameters are how this host ran it.
type internalParameters struct {
	ToolVersion string         `json:"toolVersion"`
	Host        record.Host    `json:"host"`
	Policy      *policyParams  `json:"policy,omitempty"`
	Steps       []stepInternal `json:"steps"`
}

type policyParams struct {
	DecisionID   string `json:"decisionId"`
	BundleDigest string `json:"bundleDigest"`
	InputDigest  string `json:"inputDigest"`
	Allowed      bool   `json:"allowed"`
}

type stepInternal struct {
	Name        string `json:"name"`
	Isolation   string `json:"isolation"`
	Hypervisor  string `json:"hypervisor,omitempty"`
	Accel       string `json:"accel,omitempty"`
	Seccomp     string `json:"seccomp,omitempty"`
	Environment string `json:"environment,omitempty"`
}

func predicate(id record.ID, r *record.Record, w *Workflow) (*slsa.Provenance, error) {
	ext := externalParameters{
		Workflow: workflowParams{
			Name:          r.Workflow.Name,
			FileDigest:    r.Workflow.FileDigest.String(),
			CanonicalHash: r.Workflow.CanonicalHash.String(),
		},
		SelectedSteps: []string{},
		Inputs:        []inputParams{},
	}
	for _, st := range r.Steps {
		ext.SelectedSteps = append(ext.SelectedSteps, st.Name)
	}
	slices.Sort(ext.SelectedSteps)
	for _, in := range r.Inputs {
		ext.Inputs = append(ext.Inputs, inputParams{
			Name: in.Name, Kind: in.Kind, Source: in.Source, Commit: in.Commit,
			Format: string(in.Format), Digest: in.Digest.String(),
		})
	}
	slices.SortFunc(ext.Inputs, func(a, b inputParams) int { return strings.Compare(a.Name, b.Name) })
	if w != nil {
		ext.Workflow.Source = w.Source
		selected := map[string]bool{}
		for _, n := range ext.SelectedSteps {
			selected[n] = true
		}
		for _, st := range w.Steps {
			if !selected[st.Name] {
				continue
			}
			ext.Steps = append(ext.Steps, normaliseStep(st))
		}
		slices.SortFunc(ext.Steps, func(a, b Step) int { return strings.Compare(a.Name, b.Name) })
	}
	extS, err := structOf(ext)
	if err != nil {
		return nil, fmt.Errorf("encode external parameters: %w", err)
	}

	in := internalParameters{ToolVersion: r.ToolVersion, Host: r.Host, Steps: []stepInternal{}}
	if p := r.Policy; p != nil {
		in.Policy = &policyParams{DecisionID: p.DecisionID, BundleDigest: p.BundleDigest, InputDigest: p.InputDigest, Allowed: p.Allowed}
	}
	for _, st := range r.Steps {
		si := stepInternal{Name: st.Name, Isolation: st.Isolation, Hypervisor: st.Hypervisor, Accel: st.Accel}
		if st.Seccomp != nil {
			si.Seccomp = st.Seccomp.String()
		}
		if st.Environment != nil {
			si.Environment = st.Environment.String()
		}
		in.Steps = append(in.Steps, si)
	}
	slices.SortFunc(in.Steps, func(a, b stepInternal) int { return strings.Compare(a.Name, b.Name) })
	inS, err := structOf(in)
	if err != nil {
		return nil, fmt.Errorf("encode internal parameters: %w", err)
	}

	deps, err := resolvedDependencies(r)
	if err != nil {
		return nil, err
	}
	byproducts, err := byproducts(id, r)
	if err != nil {
		return nil, err
	}
	return &slsa.Provenance{
		BuildDefinition: &slsa.BuildDefinition{
			BuildType:            BuildType,
			ExternalParameters:   extS,
			InternalParameters:   inS,
			ResolvedDependencies: deps,
		},
		RunDetails: &slsa.RunDetails{
			Builder: &slsa.Builder{
				Id:      BuilderID(r.ToolVersion),
				Version: map[string]string{"agentsandbox": r.ToolVersion},
			},
			Metadata: &slsa.BuildMetadata{
				InvocationId: id.String(),
				StartedOn:    timestamppb.New(r.Started),
				FinishedOn:   timestamppb.New(r.Finished),
			},
			Byproducts: byproducts,
		},
	}, nil
}

// normaliseStep sorts a step's sets and makes absent lists empty, so the
// caller's order and nil-ness do not change the attestation.
func normaliseStep(st Step) Step {
	sorted := func(s []string) []string {
		out := append([]string{}, s...)
		slices.Sort(out)
		return slices.Compact(out)
	}
	st.Network = sorted(st.Network)
	st.EnvNames = sorted(st.EnvNames)
	st.Needs = sorted(st.Needs)
	st.Inputs = sorted(st.Inputs)
	st.Outputs = sorted(st.Outputs)
	st.Packages = sorted(st.Packages)
	return st
}

func annotations(m map[string]any) (*structpb.Struct, error) {
	s, err := structpb.NewStruct(m)
	if err != nil {
		return nil, fmt.Errorf("encode annotations: %w", err)
	}
	return s, nil
}

// resolvedDependencies: the workflow file and its flake lock, inputs, closure store paths,
// host roots, the kernel and the runners, sorted by name then URI.
func resolvedDependencies(r *record.Record) ([]*intoto.ResourceDescriptor, error) {
	var deps []*intoto.ResourceDescriptor
	deps = append(deps, &intoto.ResourceDescriptor{
		Name: "workflow", Digest: sha256Set(r.Workflow.FileDigest), MediaType: "application/yaml",
	})
	if l := r.Workflow.Lock; l != nil && !l.IsZero() {
		deps = append(deps, &intoto.ResourceDescriptor{Name: "flake.lock", Digest: sha256Set(*l), MediaType: "application/json"})
	}
	for _, in := range r.Inputs {
		d := map[string]string{DigestSHA256: in.Digest.Hex()}
		if in.Format == record.FormatNAR {
			d = map[string]string{DigestNAR: in.Digest.Hex()}
		}
		if in.Commit != "" {
			d[DigestGitCommit] = in.Commit
		}
		a := map[string]any{"kind": in.Kind, "source": in.Source, "format": string(in.Format)}
		ann, err := annotations(a)
		if err != nil {
			return nil, err
		}
		rd := &intoto.ResourceDescriptor{Name: "input/" + in.Name, Digest: d, Annotations: ann}
		if in.Kind == "http" {
			rd.Uri = in.Source
		}
		deps = append(deps, rd)
	}
	// Store paths and host roots are shared between steps: one entry each,
	// annotated with the steps that used it.
	closure := map[string]record.StorePath{}
	closureSteps := map[string][]any{}
	hostRoots := map[record.Digest][]any{}
	type runner struct{ isolation, hypervisor, accel string }
	runners := map[runner][]any{}
	for _, st := range r.Steps {
		for _, p := range st.Closure {
			if old, ok := closure[p.Path]; ok && old.NarHash != p.NarHash {
				return nil, fmt.Errorf("store path %s has two NAR hashes in the record (%s, %s)", p.Path, old.NarHash, p.NarHash)
			}
			closure[p.Path] = p
			closureSteps[p.Path] = append(closureSteps[p.Path], st.Name)
		}
		if st.HostRoot != nil && !st.HostRoot.IsZero() {
			hostRoots[*st.HostRoot] = append(hostRoots[*st.HostRoot], st.Name)
		}
		if st.Status != record.StatusSkipped && st.Isolation != "" {
			k := runner{st.Isolation, st.Hypervisor, st.Accel}
			runners[k] = append(runners[k], st.Name)
		}
	}
	for path, p := range closure {
		ann, err := annotations(map[string]any{"steps": closureSteps[path], "narSize": float64(p.NarSize)})
		if err != nil {
			return nil, err
		}
		deps = append(deps, &intoto.ResourceDescriptor{
			Name: "closure", Uri: "nix-store:" + path, Digest: narSet(p.NarHash), Annotations: ann,
		})
	}
	for d, steps := range hostRoots {
		ann, err := annotations(map[string]any{"steps": steps})
		if err != nil {
			return nil, err
		}
		deps = append(deps, &intoto.ResourceDescriptor{Name: "host-root", Digest: sha256Set(d), Annotations: ann})
	}
	if r.Host.Kernel != "" {
		ann, err := annotations(map[string]any{"release": r.Host.Kernel, "arch": r.Host.Arch})
		if err != nil {
			return nil, err
		}
		deps = append(deps, &intoto.ResourceDescriptor{Name: "kernel", Annotations: ann})
	}
	for k, steps := range runners {
		name := "runner/" + k.isolation
		a := map[string]any{"isolation": k.isolation, "steps": steps, "toolVersion": r.ToolVersion}
		if k.hypervisor != "" {
			name += "/" + k.hypervisor
			a["hypervisor"] = k.hypervisor
		}
		if k.accel != "" {
			name += "/" + k.accel
			a["accel"] = k.accel
		}
		ann, err := annotations(a)
		if err != nil {
			return nil, err
		}
		deps = append(deps, &intoto.ResourceDescriptor{Name: name, Uri: BuilderID(r.ToolVersion), Annotations: ann})
	}
	sortDescriptors(deps)
	return deps, nil
}

// byproducts: the record, each step's job spec, logs and network log, and
// a sandbox's entries.
func byproducts(id record.ID, r *record.Record) ([]*intoto.ResourceDescriptor, error) {
	ann, err := annotations(map[string]any{"id": id.String(), "status": string(r.Status)})
	if err != nil {
		return nil, err
	}
	out := []*intoto.ResourceDescriptor{{
		// The record's id is the sha256 of its canonical bytes.
		Name: "record", Digest: map[string]string{DigestSHA256: hex.EncodeToString(id[:])},
		MediaType: "application/json", Annotations: ann,
	}}
	add := func(name string, d record.Digest, media string) {
		if d.IsZero() {
			return
		}
		out = append(out, &intoto.ResourceDescriptor{Name: name, Digest: sha256Set(d), MediaType: media})
	}
	for _, st := range r.Steps {
		add(st.Name+"/job.json", st.JobDigest, "application/json")
		add(st.Name+"/stdout.log", st.Logs.Stdout, "text/plain")
		add(st.Name+"/stderr.log", st.Logs.Stderr, "text/plain")
		if st.Logs.Console != nil {
			add(st.Name+"/console.log", *st.Logs.Console, "text/plain")
		}
		if st.Network != nil {
			add(st.Name+"/network.jsonl", st.Network.Log, "application/jsonl")
		}
	}
	if sb := r.Sandbox; sb != nil {
		for _, e := range sb.Entries {
			add(fmt.Sprintf("sandbox/entry/%d", e.Seq), e.Digest, "application/json")
		}
	}
	sortDescriptors(out)
	return out, nil
}

func sortDescriptors(ds []*intoto.ResourceDescriptor) {
	slices.SortStableFunc(ds, func(a, b *intoto.ResourceDescriptor) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		if c := strings.Compare(a.Uri, b.Uri); c != 0 {
			return c
		}
		return strings.Compare(digestKey(a.Digest), digestKey(b.Digest))
	})
}

// digestKey spells a digest set in one way, for sorting.
func digestKey(d map[string]string) string {
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + d[k] + ";")
	}
	return b.String()
}
