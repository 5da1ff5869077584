package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/inputs"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/namespace"
	"github.com/agentsandbox/agentsandbox/vmrunner/vm"
	"github.com/agentsandbox/agentsandbox/workflow"
)

type applyOptions struct {
	Isolation  string
	Jobs       int
	JSON       bool
	StateDir   string
	Store      string // the shared store's URL (--store)
	Flake      string
	Offline    bool
	UpdateLock bool
	Parent     string
	Accel      string
	Verbose    bool
	Policy     policyOptions
	Share      nixShareFlags // substituters, builders, a cache to push to
}

// accelEnv is the environment variable that sets --accel's default, for
// CI runners and agent loops that cannot change the command line.
const accelEnv = "AGENTSANDBOX_ACCEL"

func newApplyCmd(stdio Stdio) *cobra.Command {
	var opts applyOptions
	cmd := &cobra.Command{
		Use:   "apply FILE",
		Short: "Run a workflow: validate, admit, realise, run every step isolated, record",
		Long: `apply validates the workflow, admits it with the policy, realises the steps
that need Nix (packages, vm isolation), fetches and checks the inputs, runs the
steps in DAG order (independent steps in parallel up to --jobs), each in its
own jail or microVM with its quotas and network namespace, stores logs and
outputs in the blob store, and writes the execution record. The record id is
the last line printed.

A step's workspace (/workspace) holds its declared inputs and the declared
outputs of the steps it needs, and nothing else. The first SIGINT or SIGTERM
stops the run and removes everything it created; a second exits at once and
leaves the rest to 'agentsandbox gc'.

VMs use KVM where a probe shows KVM runs a guest with exactly the CPU model
and machine options the step's runner passes (cached per boot), else software
emulation (TCG), with a one-line warning; the step's record keeps the
accelerator and why. --accel tcg (or AGENTSANDBOX_ACCEL=tcg) forces software
emulation, for hosts whose KVM passes the probe but still cannot run a guest;
--accel kvm skips the probe. Auto steps are VMs only where KVM runs
microvm.nix's guests; otherwise apply says in one line that they ran in
namespace isolation and why (--verbose adds qemu's own output).` + exitStatusHelp,
		Example: `  agentsandbox apply examples/hello.yaml
  agentsandbox apply --isolation namespace --jobs 4 examples/pipeline.yaml
  agentsandbox apply --json examples/hello.yaml | jq .`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runApply(cmd.Context(), stdio, opts, args)
		},
	}
	f := cmd.Flags()
	opts.AddFlags(f)
	f.StringVar(&opts.Parent, "parent", "", "record id (or unique prefix) of the run this one reruns")
	return cmd
}

// AddFlags adds the flags of a run that apply and rerun share (all of
// apply's but --parent).
func (o *applyOptions) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Isolation, "isolation", "", "override every step's isolation: auto, vm or namespace")
	f.IntVar(&o.Jobs, "jobs", runtime.NumCPU(), "how many independent steps run at once")
	f.BoolVar(&o.JSON, "json", false, "print progress as JSON lines (one event per line) instead of text")
	f.StringVar(&o.StateDir, "state-dir", "", "where records, blobs and run directories live (default $XDG_STATE_HOME/agentsandbox, /var/lib/agentsandbox for root)")
	addStoreFlag(f, &o.Store)
	f.StringVar(&o.Flake, "flake", "", "realise steps from this flake directory instead of generating one (for example an edited 'render' output)")
	f.BoolVar(&o.Offline, "offline", false, "pass --offline to Nix")
	f.BoolVar(&o.UpdateLock, "update-lock", false, "refresh FILE.lock, the pinned flake inputs, on purpose")
	f.StringVar(&o.Accel, "accel", envOr(accelEnv, "auto"), "VM accelerator: auto (probe KVM), kvm, or tcg (software emulation); default from $"+accelEnv)
	f.BoolVarP(&o.Verbose, "verbose", "v", false, "also print the detail behind notes, such as the KVM probe's qemu output")
	o.Policy.AddFlags(f)
	o.Share.AddFlags(f)
}

func runApply(ctx context.Context, stdio Stdio, opts applyOptions, args []string) (err error) {
	ctx, endTrace := traceApply(ctx)
	defer func() { endTrace(err) }()
	path := args[0]
	endParse := tracePhase(ctx, "parse")
	w, raw, err := loadWorkflow(path, opts.Policy.parseOptions()...)
	endParse(err)
	if err != nil {
		var list *workflow.ErrorList
		if errors.As(err, &list) {
			reportLoadError(stdio.Err, err)
			return reported(err)
		}
		return err
	}
	traceWorkflow(ctx, w)
	iso, err := opts.check()
	if err != nil {
		return err
	}

	store, err := openStore(opts.StateDir)
	if err != nil {
		return err
	}
	remote, err := openRemote(opts.Store)
	if err != nil {
		return err
	}
	var parent *record.ID
	if opts.Parent != "" {
		id, err := resolveShared(ctx, stdio.Err, store, remote, opts.Parent)
		if err != nil {
			return fmt.Errorf("--parent: %w", err)
		}
		parent = &id
	}

	host := engine.ProbeHost(ctx, kvmProbeFor(opts.Accel))
	// The engine admits what it runs: this policy, evaluated on the
	// workflow with each step's resolved isolation.
	pol, err := cachedPolicy(opts.Policy, path, store.Dir())
	if err != nil {
		return err
	}
	fetcher := &inputs.Fetcher{Store: store, Limits: inputs.DefaultLimits, AllowOutside: opts.Policy.AllowOutsideInputs}
	_, err = applyWorkflow(ctx, stdio, opts, applyRun{
		Path: path, Workflow: w, Raw: raw, Isolation: iso,
		Store: store, Remote: remote, Parent: parent, Host: host, Policy: pol,
		Fetch: fetchFrom(fetcher, filepath.Dir(path)),
	})
	return err
}

// check validates --isolation and --accel, and returns the isolation
// override.
func (o applyOptions) check() (workflow.Isolation, error) {
	iso := workflow.Isolation(o.Isolation)
	switch iso {
	case "", workflow.IsolationAuto, workflow.IsolationVM, workflow.IsolationNamespace:
	default:
		return "", invalidf("--isolation %q: want auto, vm or namespace", o.Isolation)
	}
	switch o.Accel {
	case "", "auto", "kvm", "tcg":
	default:
		return "", invalidf("--accel %q (or $%s): want auto, kvm or tcg", o.Accel, accelEnv)
	}
	return iso, nil
}

// fetchFrom is the engine's FetchFunc of fetcher, with file inputs
// relative to baseDir (the workflow file's directory).
func fetchFrom(fetcher *inputs.Fetcher, baseDir string) engine.FetchFunc {
	return func(ctx context.Context, in workflow.Input, dir string) (record.Input, string, error) {
		dst := filepath.Join(dir, "content")
		f, err := fetcher.Fetch(ctx, in, baseDir, dst)
		if err != nil {
			return record.Input{}, "", err
		}
		return f.Input, f.Path, nil
	}
}

// applyRun is one run of a parsed workflow: what apply and rerun each
// work out before the run, which applyWorkflow then makes the same way.
type applyRun struct {
	Path      string // the workflow file: names its lock file
	Workflow  *workflow.Workflow
	Raw       []byte // the file's exact bytes
	Isolation workflow.Isolation
	Store     *record.Store
	Remote    record.Remote // the shared store the record is pushed to; nil: none
	Parent    *record.ID
	Host      engine.Host
	Policy    *policy.CachedEngine
	Fetch     engine.FetchFunc
	// Report, when set, prints more about a finished run after the
	// summary, before the record id (rerun: its comparison).
	Report func(*engine.Result)
}

// applyWorkflow runs r with apply's flags: progress, warnings, backends,
// the run, the summary and the record id on stdout. It returns the result
// whenever a record was written, and apply's exit status as the error.
func applyWorkflow(ctx context.Context, stdio Stdio, opts applyOptions, r applyRun) (*engine.Result, error) {
	w, path, iso, host, store := r.Workflow, r.Path, r.Isolation, r.Host, r.Store
	ctx, endTrace := ensureApplySpan(ctx, w) // rerun's; apply started its own
	defer endTrace()
	var events progress // made once the policy admits the run
	share, err := opts.Share.Sharing()
	if err != nil {
		return nil, err
	}
	var realise engine.RealiseFunc
	if host.Nix {
		nr := &engine.NixRealiser{
			Share:    share,
			Workflow: w, WorkflowPath: path, FlakeDir: opts.Flake,
			GenDir:  engine.GenDirFor(store.Dir(), w),
			Offline: opts.Offline, UpdateLock: opts.UpdateLock,
			KVM: host.KVMUsable, KVMReason: host.KVMReason,
			Stderr: stdio.Err,
		}
		realise = nr.Realise
	}

	var names []string
	for _, s := range w.Steps {
		names = append(names, s.Name)
	}
	progressOut := stdio.Out
	if !opts.JSON {
		progressOut = stdio.Err // keep stdout for the summary and the record id
	}
	warn := func(line string) {
		events.Event(engine.Event{Time: time.Now(), Kind: engine.EventWarning, Line: line})
	}
	// The engine admits the run before anything else happens. The policy's
	// warnings go to stderr as "warning: MESSAGE"; a denied run shows
	// nothing more (its messages are the error). An admitted run gets its
	// progress display, and the host's warnings.
	onEvent := func(e engine.Event) {
		if e.Kind != engine.EventAdmitted {
			events.Event(e)
			return
		}
		for _, m := range e.Decision.Warn {
			fmt.Fprintf(stdio.Err, "warning: %s\n", m)
		}
		if !e.Decision.Allowed() {
			return
		}
		events = newProgress(progressOut, opts.JSON, names)
		if line := autoIsolationNote(w, iso, host, opts.Accel); line != "" {
			events.Event(engine.Event{Time: time.Now(), Kind: engine.EventNote, Line: line})
			if opts.Verbose && host.KVMDetail != "" {
				events.Event(engine.Event{Time: time.Now(), Kind: engine.EventNote, Line: "the KVM probe's qemu said: " + host.KVMDetail})
			}
		}
	}
	backends := map[workflow.Isolation]vmrunner.Backend{}
	if host.Root {
		backends[workflow.IsolationNamespace] = namespace.New(namespace.Options{})
		if vm := vmBackend(host, opts.Accel, warn); vm != nil {
			backends[workflow.IsolationVM] = vm
		}
	}
	res, runErr := engine.Run(ctx, w, engine.Options{
		WorkflowPath: path, WorkflowBytes: r.Raw,
		Isolation: iso, Jobs: opts.Jobs, Host: host, Store: store,
		RunRoot:  filepath.Join(store.Dir(), "runs"),
		Backends: backends, Realise: realise, Fetch: r.Fetch,
		Policy: r.Policy, ToolVersion: toolVersion(), Parent: r.Parent,
		Events: onEvent,
	})
	traceRun(ctx, res, runErr)
	if events != nil {
		events.Close()
	}
	if res != nil && !opts.JSON {
		printSummary(stdio.Out, res)
	}
	if res != nil && r.Report != nil {
		r.Report(res)
	}
	if res != nil {
		fmt.Fprintln(stdio.Out, res.ID)
	}
	var pushErr error
	if res != nil && r.Remote != nil {
		// The record is durable here whatever happens to the push.
		if pushErr = pushRecord(ctx, stdio.Err, store, r.Remote, res.ID); pushErr != nil {
			pushErr = fmt.Errorf("%w\nthe record is kept in %s; send it later with: agentsandbox records push %s --store URL", pushErr, store.Dir(), res.ID)
		}
	}
	if runErr != nil {
		return res, interrupted(runErr)
	}
	if !res.Succeeded() {
		if pushErr != nil {
			fmt.Fprintf(stdio.Err, "agentsandbox: %v\n", pushErr)
		}
		return res, reported(errStepFailed)
	}
	if pushErr != nil {
		return res, pushErr
	}
	return res, nil
}

// interrupted says what an interrupted run left: nothing.
func interrupted(err error) error {
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("interrupted; everything the run created was removed: %w", err)
	}
	return err
}

func openStore(dir string) (*record.Store, error) {
	if dir == "" {
		d, err := record.DefaultStateDir()
		if err != nil {
			return nil, err
		}
		dir = d
	}
	s, err := record.OpenStore(dir)
	if err != nil {
		return nil, fmt.Errorf("open state directory %s: %w", dir, err)
	}
	return s, nil
}

// printSummary prints a table of the steps: status, exit code, duration,
// peak memory and CPU time.
func printSummary(w io.Writer, res *engine.Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tSTATUS\tEXIT\tDURATION\tPEAK MEM\tCPU\tISOLATION")
	for _, s := range res.Record.Steps {
		exit := "-"
		switch {
		case s.Signal != "":
			exit = s.Signal
		case s.Status != record.StatusSkipped && s.ExitCode >= 0:
			exit = fmt.Sprint(s.ExitCode)
		}
		dur := "-"
		if !s.Started.IsZero() {
			dur = s.Finished.Sub(s.Started).Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Status, exit, dur,
			humanBytes(s.Usage.PeakMemoryBytes), time.Duration(s.Usage.CPUTimeNs).Round(time.Millisecond), isoLabel(s))
	}
	tw.Flush()
	fmt.Fprintf(w, "run %s in %s\n", res.Record.Status, res.Record.Duration().Round(time.Millisecond))
}

func isoLabel(s record.Step) string {
	if s.Accel != "" {
		return fmt.Sprintf("%s (%s, %s)", s.Isolation, s.Hypervisor, s.Accel)
	}
	return s.Isolation
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// kvmProbeFor is the per-boot cached KVM probe for microvm.nix's runners
// (vm.MicrovmNixTarget: -cpu host): whether auto steps may be VMs, and
// whether the realiser builds the KVM or the software-emulation runner.
// A forced accelerator (--accel, $AGENTSANDBOX_ACCEL) is not probed.
func kvmProbeFor(accel string) engine.KVMProbe {
	switch accel {
	case "tcg":
		return func(context.Context) vmrunner.KVMAnswer {
			return vmrunner.KVMAnswer{Reason: "software emulation forced (--accel tcg or " + accelEnv + "=tcg)"}
		}
	case "kvm":
		return func(context.Context) vmrunner.KVMAnswer {
			return vmrunner.KVMAnswer{Usable: true, Reason: "KVM forced (--accel kvm), not probed"}
		}
	}
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return func(context.Context) vmrunner.KVMAnswer { return vmrunner.KVMAnswer{Reason: "/dev/kvm does not exist"} }
	}
	return vm.ProbeKVM
}

// autoIsolationNote is the one line apply prints when its own decision,
// resolving auto steps, went to namespace isolation on a host whose
// /dev/kvm exists but cannot run a guest: what was used and why. Nothing
// when the host simply has no KVM, when --accel tcg said not to use it, or
// when no step is auto. How a vm step's VM runs is the vm backend's
// decision, which it states itself.
func autoIsolationNote(w *workflow.Workflow, override workflow.Isolation, h engine.Host, accel string) string {
	if h.KVMUsable || !h.QEMU || !h.Nix || accel == "tcg" || strings.HasPrefix(h.KVMReason, "/dev/kvm does not exist") {
		return ""
	}
	for _, s := range w.Steps {
		iso := s.Isolation
		if override != "" {
			iso = override
		}
		if iso == workflow.IsolationAuto || iso == "" {
			return "auto steps run in namespace isolation: KVM cannot run a guest here (" + h.KVMReason +
				"); --isolation vm runs them in software-emulated VMs"
		}
	}
	return ""
}

// vmBackend is the vm backend where qemu is installed. It probes each
// runner's own CPU model (cached per boot) unless --accel forces one, and
// hands its one-line warnings to warn.
func vmBackend(h engine.Host, accel string, warn func(string)) vmrunner.Backend {
	if !h.QEMU {
		return nil
	}
	o := vm.Options{Warn: warn}
	if accel == "kvm" || accel == "tcg" {
		o.Accel = accel
	}
	return vm.New(o)
}

// envOr is the environment variable's value, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
