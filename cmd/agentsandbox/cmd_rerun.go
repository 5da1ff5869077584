package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/inputs"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/workflow"
)

type rerunOptions struct {
	Apply applyOptions
	// Dir is the directory the workflow was applied from: its
	// .agentsandbox/policy folder is loaded, and file inputs whose blobs
	// are gone are fetched from it again.
	Dir string
	// Lock is a flake lock (WORKFLOW.lock) to build with instead of the
	// one the record kept.
	Lock string
	// RequireSamePolicy refuses to run when the policy bundle is not the
	// one the record was admitted under.
	RequireSamePolicy bool
}

func newRerunCmd(stdio Stdio) *cobra.Command {
	var opts rerunOptions
	cmd := &cobra.Command{
		Use:   "rerun RECORD",
		Short: "Run a recorded workflow again from the record and compare the outputs",
		Long: `rerun runs the workflow of an execution record again, as apply would, and
compares the new run with the old one output by output.

The workflow is the record's own copy of the file's exact bytes, read from
the blob store and verified. Inputs are placed from their recorded blobs
(verified as read); an input whose blob is gone is fetched again (a file
input from --dir, the directory the workflow was applied from) and must have
the recorded digest. Each step gets the isolation it was recorded with where
that can be forced; where it cannot, rerun says so. The policy is loaded as
apply loads it (with --dir, also that directory's .agentsandbox/policy); if
its bundle digest is not the recorded one, rerun warns that admission may
differ, or refuses with --require-same-policy. The new record's parent is the
old record.

After the run, every step's status and every output present in both records
is compared: identical (the same NAR hash) or different, with the files that
differ and their sizes. The new record id is the last line printed.

A step marked deterministic in the workflow must end the same way and
reproduce its outputs: if it does not, rerun exits 1 naming the step, the
output and the files. Otherwise the exit status is apply's.` + exitStatusHelp,
		Example: `  agentsandbox rerun 1b4k
  agentsandbox rerun --isolation namespace --dir examples 1b4k9w
  agentsandbox rerun --require-same-policy --json 1b4k | jq .`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRerun(cmd.Context(), stdio, opts, args)
		},
	}
	f := cmd.Flags()
	opts.Apply.AddFlags(f)
	f.StringVar(&opts.Dir, "dir", "", "the directory the workflow was applied from: its .agentsandbox/policy is loaded, and file inputs whose blobs are gone are fetched from it")
	f.StringVar(&opts.Lock, "lock", "", "a flake lock (WORKFLOW.lock) to pin Nix's inputs instead of the one the record kept (older records keep none)")
	f.BoolVar(&opts.RequireSamePolicy, "require-same-policy", false, "refuse to run when the policy bundle differs from the one the record was admitted under")
	return cmd
}

func runRerun(ctx context.Context, stdio Stdio, opts rerunOptions, args []string) error {
	iso, err := opts.Apply.check()
	if err != nil {
		return err
	}
	store, err := openStore(opts.Apply.StateDir)
	if err != nil {
		return err
	}
	remote, err := openRemote(opts.Apply.Store)
	if err != nil {
		return err
	}
	id, err := resolveShared(ctx, stdio.Err, store, remote, args[0])
	if err != nil {
		return fmt.Errorf("rerun: %w", err)
	}
	old, err := store.Get(id)
	if err != nil {
		return fmt.Errorf("rerun %s: %w", id, err)
	}
	if old.Sandbox != nil {
		return invalid(fmt.Errorf("rerun %s: the record of a long-lived sandbox (agentsandbox serve) has no workflow to run; only apply's records can be rerun", id))
	}
	raw, err := readBlob(store, old.Workflow.FileDigest)
	if err != nil {
		return fmt.Errorf("rerun %s: read the recorded workflow file: %w", id, err)
	}

	// The file goes to a private directory of its own: the lock file and
	// the policy folder apply looks for beside a workflow are not there
	// unless --lock and --dir say where they are.
	tmp, err := store.TempDir("rerun-")
	if err != nil {
		return fmt.Errorf("rerun %s: %w", id, err)
	}
	defer os.RemoveAll(tmp)
	name := old.Workflow.Name
	if name == "" || strings.ContainsAny(name, "/\x00") {
		name = "workflow"
	}
	path := filepath.Join(tmp, name+".yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return fmt.Errorf("rerun %s: write the workflow file: %w", id, err)
	}
	// The flake inputs are pinned by --lock, else by the lock the record
	// kept (records since the lock became part of them).
	var lock []byte
	switch {
	case opts.Lock != "":
		if lock, err = os.ReadFile(opts.Lock); err != nil {
			return invalid(fmt.Errorf("--lock: %w", err))
		}
	case old.Workflow.Lock != nil:
		if lock, err = readBlob(store, *old.Workflow.Lock); err != nil {
			return fmt.Errorf("rerun %s: read the recorded flake lock: %w", id, err)
		}
	}
	if lock != nil {
		if err := os.WriteFile(path+".lock", lock, 0o600); err != nil {
			return fmt.Errorf("rerun %s: write the lock file: %w", id, err)
		}
	}
	w, err := workflow.Parse(path, raw, opts.Apply.Policy.parseOptions()...)
	if err != nil {
		reportLoadError(stdio.Err, err)
		return reported(invalid(err))
	}
	warnf := func(format string, args ...any) { fmt.Fprintf(stdio.Err, "warning: "+format+"\n", args...) }
	if h := record.Digest(w.Hash()); h != old.Workflow.CanonicalHash {
		warnf("the workflow's canonical hash is now %s, the record has %s: this agentsandbox reads the same file differently", h, old.Workflow.CanonicalHash)
	}

	host := engine.ProbeHost(ctx, kvmProbeFor(opts.Apply.Accel))
	iso, err = rerunIsolation(w, old, iso, host, warnf)
	if err != nil {
		return err
	}
	if opts.Lock == "" && old.Workflow.Lock == nil && host.Nix && usedNix(old) {
		warnf("the record (from before records kept the flake lock) does not pin the flake inputs: Nix locks them afresh (nixpkgs itself is pinned by the workflow); pass --lock WORKFLOW.lock for the pins of the recorded run")
	}

	policyPath := path
	if opts.Dir != "" {
		policyPath = filepath.Join(opts.Dir, filepath.Base(path))
	}
	pol, err := cachedPolicy(opts.Apply.Policy, policyPath, store.Dir())
	if err != nil {
		return err
	}
	if cur, was := pol.BundleDigest().String(), recordedBundle(old); cur != was {
		msg := fmt.Sprintf("the policy bundle is %s, the record was admitted under %s: the admission may differ", cur, was)
		if opts.RequireSamePolicy {
			return invalid(fmt.Errorf("--require-same-policy: %s", msg))
		}
		warnf("%s", msg)
	}

	fetcher := &inputs.Fetcher{Store: store, Limits: inputs.DefaultLimits, AllowOutside: opts.Apply.Policy.AllowOutsideInputs}
	fetch := storedInputs(fetcher, old.Inputs, opts.Dir, func(line string) { fmt.Fprintln(stdio.Err, "note: "+line) })
	var cmp *rerunComparison
	var cmpErr error
	_, runErr := applyWorkflow(ctx, stdio, opts.Apply, applyRun{
		Path: path, Workflow: w, Raw: raw, Isolation: iso,
		Store: store, Remote: remote, Parent: &id, Host: host, Policy: pol, Fetch: fetch,
		Report: func(res *engine.Result) {
			cmp, cmpErr = compareRuns(store, w, id, old, res.Record)
			if cmpErr != nil {
				return
			}
			cmp.Record = res.ID
			if opts.Apply.JSON {
				printComparisonJSON(stdio.Out, cmp)
			} else {
				printComparison(stdio.Out, cmp)
			}
		},
	})
	if errors.Is(runErr, errInputGone) {
		return runErr // before the comparison, which has nothing to compare
	}
	if cmpErr != nil {
		return fmt.Errorf("compare with %s: %w", id, cmpErr)
	}
	if cmp != nil && len(cmp.Failures) > 0 {
		return checkFailed(fmt.Errorf("not reproduced: %s", strings.Join(cmp.Failures, "; ")))
	}
	return runErr
}

// recordedBundle is the policy bundle digest the record was admitted
// under, or a phrase saying there is none.
func recordedBundle(r *record.Record) string {
	if r.Policy == nil || r.Policy.BundleDigest == "" {
		return "no policy (the record has no admission decision)"
	}
	return r.Policy.BundleDigest
}

// usedNix reports whether any step of the record ran on a Nix closure.
func usedNix(r *record.Record) bool {
	for _, s := range r.Steps {
		if len(s.Closure) > 0 || s.Environment != nil {
			return true
		}
	}
	return false
}

// rerunIsolation is the isolation override of a rerun. An --isolation
// flag wins. Otherwise the steps keep the host's resolution when it gives
// each step the isolation the record has; when it does not, and every
// recorded step had one level this host can run, that level is forced; a
// mix cannot be forced step by step, nor a level the host lacks: that is
// said, and the host's resolution runs.
func rerunIsolation(w *workflow.Workflow, old *record.Record, flag workflow.Isolation, host engine.Host, warnf func(string, ...any)) (workflow.Isolation, error) {
	recorded := map[string]string{}
	levels := map[string]bool{}
	for _, s := range old.Steps {
		if s.Isolation != "" {
			recorded[s.Name] = s.Isolation
			levels[s.Isolation] = true
		}
	}
	plan, err := engine.Resolve(w, flag, host.Policy())
	if err != nil {
		return "", invalid(err)
	}
	var moved []string
	for _, s := range plan.Steps {
		if was, ok := recorded[s.Name]; ok && was != string(s.Isolation) {
			moved = append(moved, fmt.Sprintf("%s (recorded %s, now %s)", s.Name, was, s.Isolation))
		}
	}
	switch {
	case len(moved) == 0:
		return flag, nil
	case flag != "":
		warnf("--isolation %s runs steps in other isolation than the record: %s", flag, strings.Join(moved, ", "))
		return flag, nil
	case len(levels) == 1:
		var level string
		for l := range levels {
			level = l
		}
		if !slices.Contains(host.Policy().Isolation, level) {
			warnf("this host resolves isolation differently from the recorded run: %s; %s isolation cannot run here, so the steps run as this host resolves them", strings.Join(moved, ", "), level)
			return "", nil
		}
		warnf("this host resolves isolation differently from the recorded run: %s; forcing %s, as recorded", strings.Join(moved, ", "), level)
		return workflow.Isolation(level), nil
	}
	warnf("this host resolves isolation differently from the recorded run: %s; the record mixes levels, which cannot be forced step by step, so the steps run as this host resolves them", strings.Join(moved, ", "))
	return "", nil
}

// errInputGone marks a rerun input whose blob is gone and which cannot be
// fetched again without --dir.
var errInputGone = errors.New("input blob missing")

// storedInputs is a rerun's FetchFunc. An input the record kept is placed
// from its blob, re-hashed as it is read. One whose blob is gone is fetched
// again (a file input from dir, the directory the workflow was applied
// from) and must have the digest the record has; note says that it was.
// An input the record does not have is fetched as apply would.
func storedInputs(fetcher *inputs.Fetcher, recorded []record.Input, dir string, note func(string)) engine.FetchFunc {
	byName := map[string]record.Input{}
	for _, in := range recorded {
		byName[in.Name] = in
	}
	return func(ctx context.Context, in workflow.Input, into string) (record.Input, string, error) {
		dst := filepath.Join(into, "content")
		rec, ok := byName[in.Name]
		if !ok {
			if in.Kind == workflow.InputFile && dir == "" {
				return record.Input{}, "", fmt.Errorf("input %q is not in the record; pass --dir DIR (the directory the workflow was applied from) to fetch it: %w", in.Name, errInputGone)
			}
			return fetchFrom(fetcher, dir)(ctx, in, into)
		}
		if fetcher.Store.HasBlob(rec.Digest) {
			if err := fetcher.PlaceStored(rec, in.Source, dst); err != nil {
				return record.Input{}, "", fmt.Errorf("input %q from the store: %w (agentsandbox records verify names damaged blobs)", in.Name, err)
			}
			return rec, dst, nil
		}
		from := in.Source
		if in.Kind == workflow.InputFile {
			if dir == "" {
				return record.Input{}, "", fmt.Errorf("input %q: its blob %s is not in the store, and a file input can only be fetched again from the directory the workflow was applied from; pass --dir DIR: %w", in.Name, rec.Digest, errInputGone)
			}
			from = filepath.Join(dir, in.Source)
		}
		f, err := fetcher.Fetch(ctx, in, dir, dst)
		if err != nil {
			return record.Input{}, "", err
		}
		if f.Input.Digest != rec.Digest || f.Input.Format != rec.Format {
			os.RemoveAll(dst)
			return record.Input{}, "", fmt.Errorf("input %q fetched again from %s is %s %s, the record has %s %s: the source changed since the recorded run: %w",
				in.Name, from, f.Input.Format, f.Input.Digest, rec.Format, rec.Digest, inputs.ErrChecksum)
		}
		note(fmt.Sprintf("input %q was not in the store: fetched again from %s, and its digest %s is the recorded one", in.Name, from, rec.Digest))
		return f.Input, f.Path, nil
	}
}

// rerunComparison is how a rerun's record compares with its parent's.
type rerunComparison struct {
	Parent record.ID        `json:"parent"`
	Record record.ID        `json:"record"`
	Steps  []stepComparison `json:"steps"`
	// Identical and Different count the outputs present in both runs.
	Identical int `json:"identical"`
	Different int `json:"different"`
	// Failures name what a deterministic step did not reproduce.
	Failures []string `json:"failures"`
}

// stepComparison compares one step present in both records.
type stepComparison struct {
	Step          string `json:"step"`
	Deterministic bool   `json:"deterministic"`
	// SameEnd is true when status and exit code (or signal) are equal.
	SameEnd         bool               `json:"sameEnd"`
	StatusA         record.Status      `json:"statusA"`
	StatusB         record.Status      `json:"statusB"`
	ExitA           string             `json:"exitA"`
	ExitB           string             `json:"exitB"`
	IsolationA      string             `json:"isolationA"`
	IsolationB      string             `json:"isolationB"`
	SameInputs      bool               `json:"sameInputs"`
	SameEnvironment bool               `json:"sameEnvironment"`
	Outputs         []outputComparison `json:"outputs"`
}

// outputComparison compares one output of a step.
type outputComparison struct {
	Path          string `json:"path"`
	Deterministic bool   `json:"deterministic"`
	// Result is identical, different, or only-in-parent / only-in-rerun
	// for an output one run did not keep.
	Result   string            `json:"result"`
	NarHashA *record.NarHash   `json:"narHashA,omitempty"`
	NarHashB *record.NarHash   `json:"narHashB,omitempty"`
	Files    []record.FileDiff `json:"files,omitempty"`
	Omitted  int               `json:"omitted,omitempty"`
}

// The values of outputComparison.Result.
const (
	resultIdentical  = "identical"
	resultDifferent  = "different"
	resultOnlyParent = "only-in-parent"
	resultOnlyRerun  = "only-in-rerun"
)

// compareRuns compares record b, a rerun of w, with its parent a (id):
// each step in both, and each output of it, with the stored outputs'
// files where they differ. A step marked deterministic that ends
// differently, or whose deterministic output differs or is missing from
// the rerun, is a failure.
func compareRuns(store *record.Store, w *workflow.Workflow, id record.ID, a, b *record.Record) (*rerunComparison, error) {
	c := &rerunComparison{Parent: id, Failures: []string{}}
	byName := map[string]record.Step{}
	for _, s := range b.Steps {
		byName[s.Name] = s
	}
	det := map[string]workflow.Step{}
	for _, s := range w.Steps {
		det[s.Name] = s
	}
	steps := append([]record.Step(nil), a.Steps...)
	sort.Slice(steps, func(i, j int) bool { return steps[i].Name < steps[j].Name })
	for _, sa := range steps {
		sb, ok := byName[sa.Name]
		if !ok {
			continue
		}
		ws := det[sa.Name]
		sc := stepComparison{
			Step: sa.Name, Deterministic: ws.Deterministic,
			StatusA: sa.Status, StatusB: sb.Status, ExitA: exitText(sa), ExitB: exitText(sb),
			IsolationA: sa.Isolation, IsolationB: sb.Isolation,
			SameInputs:      sameDigests(sa.Inputs, sb.Inputs),
			SameEnvironment: sameEnvironment(sa, sb),
			Outputs:         []outputComparison{},
		}
		sc.SameEnd = sc.StatusA == sc.StatusB && sc.ExitA == sc.ExitB
		if ws.Deterministic && !sc.SameEnd {
			c.Failures = append(c.Failures, fmt.Sprintf("deterministic step %q ended %s (exit %s), the recorded run %s (exit %s)", sa.Name, sc.StatusB, sc.ExitB, sc.StatusA, sc.ExitA))
		}
		outB := map[string]record.Output{}
		for _, o := range sb.Outputs {
			outB[o.Path] = o
		}
		seen := map[string]bool{}
		for _, oa := range sa.Outputs {
			seen[oa.Path] = true
			oc := outputComparison{Path: oa.Path, Deterministic: ws.OutputDeterministic(oa.Path), NarHashA: ptr(oa.NarHash)}
			ob, ok := outB[oa.Path]
			if !ok {
				oc.Result = resultOnlyParent
				if oc.Deterministic {
					c.Failures = append(c.Failures, fmt.Sprintf("deterministic output %s of step %q is missing from the rerun", oa.Path, sa.Name))
				}
				sc.Outputs = append(sc.Outputs, oc)
				continue
			}
			oc.NarHashB = ptr(ob.NarHash)
			d, err := store.CompareOutputs(oa.NarHash, ob.NarHash)
			if err != nil {
				return nil, fmt.Errorf("step %q output %s: %w", sa.Name, oa.Path, err)
			}
			if d.Identical {
				oc.Result = resultIdentical
				c.Identical++
			} else {
				oc.Result, oc.Files, oc.Omitted = resultDifferent, d.Files, d.Omitted
				c.Different++
				if oc.Deterministic {
					c.Failures = append(c.Failures, fmt.Sprintf("deterministic output %s of step %q differs (%s)", oa.Path, sa.Name, fileList(d, oa.Path)))
				}
			}
			sc.Outputs = append(sc.Outputs, oc)
		}
		for _, ob := range sb.Outputs {
			if !seen[ob.Path] {
				sc.Outputs = append(sc.Outputs, outputComparison{Path: ob.Path, Deterministic: ws.OutputDeterministic(ob.Path), Result: resultOnlyRerun, NarHashB: ptr(ob.NarHash)})
			}
		}
		sort.Slice(sc.Outputs, func(i, j int) bool { return sc.Outputs[i].Path < sc.Outputs[j].Path })
		c.Steps = append(c.Steps, sc)
	}
	return c, nil
}

func ptr[T any](v T) *T { return &v }

// exitText is a step's exit as the summary prints it: a signal's name, the
// exit code, or "-" when it never ran.
func exitText(s record.Step) string {
	switch {
	case s.Signal != "":
		return s.Signal
	case s.Status != record.StatusSkipped && s.ExitCode >= 0:
		return fmt.Sprint(s.ExitCode)
	}
	return "-"
}

func sameDigests(a, b map[string]record.Digest) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// sameEnvironment reports whether two steps ran on the same environment:
// closure, environment hash and host root fingerprint.
func sameEnvironment(a, b record.Step) bool {
	eq := func(x, y *record.Digest) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	if !eq(a.Environment, b.Environment) || !eq(a.HostRoot, b.HostRoot) || len(a.Closure) != len(b.Closure) {
		return false
	}
	ca := append([]record.StorePath(nil), a.Closure...)
	cb := append([]record.StorePath(nil), b.Closure...)
	sort.Slice(ca, func(i, j int) bool { return ca[i].Path < ca[j].Path })
	sort.Slice(cb, func(i, j int) bool { return cb[i].Path < cb[j].Path })
	for i := range ca {
		if ca[i] != cb[i] {
			return false
		}
	}
	return true
}

// filePath is a differing file's path for people: the output's own path
// for an output that is a single file (CompareOutputs' ".").
func filePath(f record.FileDiff, output string) string {
	if f.Path == "." {
		return output
	}
	return f.Path
}

// fileList names the files of output's difference, at most a few.
func fileList(d record.OutputDiff, output string) string {
	const most = 5
	var names []string
	for i, f := range d.Files {
		if i == most {
			break
		}
		names = append(names, fmt.Sprintf("%s %s", filePath(f, output), f.Change))
	}
	if more := len(d.Files) - len(names) + d.Omitted; more > 0 {
		names = append(names, fmt.Sprintf("and %d more", more))
	}
	return "files: " + strings.Join(names, ", ")
}

// printComparison prints the comparison for people: per step how it
// ended, per output identical or different, and for a difference each
// file with its change and sizes.
func printComparison(w io.Writer, c *rerunComparison) {
	fmt.Fprintf(w, "compared with %s:\n", c.Parent)
	for _, s := range c.Steps {
		mark := ""
		if s.Deterministic {
			mark = " [deterministic]"
		}
		end := fmt.Sprintf("%s, exit %s", s.StatusB, s.ExitB)
		if s.SameEnd {
			end += " (same)"
		} else {
			end += fmt.Sprintf(" (recorded: %s, exit %s)", s.StatusA, s.ExitA)
		}
		fmt.Fprintf(w, "  %s%s: %s\n", s.Step, mark, end)
		if s.IsolationA != s.IsolationB {
			fmt.Fprintf(w, "    isolation %s (recorded %s)\n", s.IsolationB, s.IsolationA)
		}
		if !s.SameInputs {
			fmt.Fprintf(w, "    inputs differ from the recorded run's\n")
		}
		if !s.SameEnvironment {
			fmt.Fprintf(w, "    environment (closure or host root) differs from the recorded run's\n")
		}
		for _, o := range s.Outputs {
			mark := ""
			if o.Deterministic {
				mark = " [deterministic]"
			}
			fmt.Fprintf(w, "    %s%s: %s\n", o.Path, mark, o.Result)
			for _, f := range o.Files {
				fmt.Fprintf(w, "      %-8s %s  %s\n", f.Change, filePath(f, o.Path), sizeChange(f))
			}
			if o.Omitted > 0 {
				fmt.Fprintf(w, "      and %d more differences\n", o.Omitted)
			}
		}
	}
	fmt.Fprintf(w, "%d outputs identical, %d different\n", c.Identical, c.Different)
}

// sizeChange is a file difference's sizes, in bytes.
func sizeChange(f record.FileDiff) string {
	switch f.Change {
	case record.ChangeAdded:
		return fmt.Sprintf("%d bytes in the rerun", f.SizeB)
	case record.ChangeRemoved:
		return fmt.Sprintf("%d bytes in the recorded run", f.SizeA)
	}
	if f.LinkA != "" || f.LinkB != "" {
		return fmt.Sprintf("-> %s, recorded -> %s", f.LinkB, f.LinkA)
	}
	return fmt.Sprintf("%d bytes, recorded %d bytes", f.SizeB, f.SizeA)
}

// printComparisonJSON prints the comparison as one JSON line, beside
// --json's events: {"kind":"comparison","comparison":{...}}.
func printComparisonJSON(w io.Writer, c *rerunComparison) {
	_ = json.NewEncoder(jsonSafe{w}).Encode(struct {
		Kind       string           `json:"kind"`
		Comparison *rerunComparison `json:"comparison"`
	}{"comparison", c})
}
