package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/inputs"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/namespace"
	"github.com/agentsandbox/agentsandbox/vmrunner/nixbuild"
	"github.com/agentsandbox/agentsandbox/vmrunner/pipeline"
	"github.com/agentsandbox/agentsandbox/vmrunner/vm"
	"github.com/agentsandbox/agentsandbox/workflow"
)

type applyOptions struct {
	Isolation  string
	Jobs       int
	JSON       bool
	StateDir   string
	Flake      string
	Offline    bool
	UpdateLock bool
	Parent     string
	Policy     policyOptions
}

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
leaves the rest to 'agentsandbox gc'.` + exitStatusHelp,
		Example: `  agentsandbox apply examples/hello.yaml
  agentsandbox apply --isolation namespace --jobs 4 examples/pipeline.yaml
  agentsandbox apply --json examples/hello.yaml | jq .`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runApply(cmd.Context(), stdio, opts, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Isolation, "isolation", "", "override every step's isolation: auto, vm or namespace")
	f.IntVar(&opts.Jobs, "jobs", runtime.NumCPU(), "how many independent steps run at once")
	f.BoolVar(&opts.JSON, "json", false, "print progress as JSON lines (one event per line) instead of text")
	f.StringVar(&opts.StateDir, "state-dir", "", "where records, blobs and run directories live (default $XDG_STATE_HOME/agentsandbox, /var/lib/agentsandbox for root)")
	f.StringVar(&opts.Flake, "flake", "", "realise steps from this flake directory instead of generating one (for example an edited 'render' output)")
	f.BoolVar(&opts.Offline, "offline", false, "pass --offline to Nix")
	f.BoolVar(&opts.UpdateLock, "update-lock", false, "refresh FILE.lock, the pinned flake inputs, on purpose")
	f.StringVar(&opts.Parent, "parent", "", "record id (or unique prefix) of the run this one reruns")
	opts.Policy.AddFlags(f)
	return cmd
}

func runApply(ctx context.Context, stdio Stdio, opts applyOptions, args []string) error {
	path := args[0]
	w, raw, err := loadWorkflow(path)
	if err != nil {
		var list *workflow.ErrorList
		if errors.As(err, &list) {
			reportLoadError(stdio.Err, err)
			return &silentError{code: ExitInvalid}
		}
		return err
	}
	iso := workflow.Isolation(opts.Isolation)
	switch iso {
	case "", workflow.IsolationAuto, workflow.IsolationVM, workflow.IsolationNamespace:
	default:
		return usageErrorf("--isolation %q: want auto, vm or namespace", opts.Isolation)
	}

	store, err := openStore(opts.StateDir)
	if err != nil {
		return err
	}
	var parent *record.ID
	if opts.Parent != "" {
		id, err := store.Resolve(opts.Parent)
		if err != nil {
			return withExit(ExitInvalid, fmt.Errorf("--parent: %w", err))
		}
		parent = &id
	}

	host := pipeline.ProbeHost(ctx, kvmProbe(store.Dir()))
	decision, err := admit(ctx, opts.Policy, path, w, host.Policy(), stdio.Err)
	if err != nil {
		return err
	}

	backends := map[workflow.Isolation]vmrunner.Backend{}
	if host.Root {
		backends[workflow.IsolationNamespace] = namespace.New(namespace.Options{})
		if vm := vmBackend(host); vm != nil {
			backends[workflow.IsolationVM] = vm
		}
	}
	var events progress
	var realise pipeline.RealiseFunc
	if host.Nix {
		nr := &pipeline.NixRealiser{
			Workflow: w, WorkflowPath: path, FlakeDir: opts.Flake,
			GenDir:  pipeline.GenDirFor(store.Dir(), w),
			Offline: opts.Offline, UpdateLock: opts.UpdateLock,
			KVM:    host.KVMUsable,
			Stderr: stdio.Err,
		}
		realise = nr.Realise
	}
	fetcher := &inputs.Fetcher{Store: store, Limits: inputs.DefaultLimits}
	baseDir := filepath.Dir(path)
	fetch := func(ctx context.Context, in workflow.Input, dir string) (record.Input, string, error) {
		dst := filepath.Join(dir, "content")
		f, err := fetcher.Fetch(ctx, in, baseDir, dst)
		if err != nil {
			return record.Input{}, "", err
		}
		return f.Input, f.Path, nil
	}

	var names []string
	for _, s := range w.Steps {
		names = append(names, s.Name)
	}
	progressOut := stdio.Out
	if !opts.JSON {
		progressOut = stdio.Err // keep stdout for the summary and the record id
	}
	events = newProgress(progressOut, opts.JSON, names)
	if !host.KVMUsable && host.QEMU {
		for _, s := range w.Steps {
			if s.Isolation == workflow.IsolationVM || iso == workflow.IsolationVM {
				events.Event(pipeline.Event{Time: time.Now(), Kind: pipeline.EventWarning,
					Line: "KVM is not usable here (" + host.KVMReason + "): VMs run under software emulation (TCG), much slower"})
				break
			}
		}
	}
	res, runErr := pipeline.Run(ctx, w, pipeline.Options{
		WorkflowPath: path, WorkflowBytes: raw,
		Isolation: iso, Jobs: opts.Jobs, Host: host, Store: store,
		RunRoot:  filepath.Join(store.Dir(), "runs"),
		Backends: backends, Realise: realise, Fetch: fetch,
		Decision: decision, ToolVersion: toolVersion(), Parent: parent,
		Events: events.Event,
	})
	events.Close()
	if res != nil && !opts.JSON {
		printSummary(stdio.Out, res)
	}
	if res != nil {
		fmt.Fprintln(stdio.Out, res.ID)
	}
	if runErr != nil {
		return applyExit(runErr)
	}
	if !res.Succeeded() {
		return &silentError{code: ExitStepFailed}
	}
	return nil
}

// applyExit sorts a stopped run's error into its exit status.
func applyExit(err error) error {
	var build *pipeline.BuildError
	switch {
	case errors.Is(err, nixbuild.ErrBuildUsers):
		return withExit(ExitInfra, err) // the host's Nix setup, not the workflow
	case errors.As(err, &build):
		return withExit(ExitBuild, err)
	case errors.Is(err, nixbuild.ErrNixMissing), errors.Is(err, pipeline.ErrNoNix):
		return withExit(ExitInfra, err)
	case errors.Is(err, inputs.ErrChecksum):
		return withExit(ExitInvalid, err)
	case errors.Is(err, context.Canceled):
		return withExit(ExitInfra, fmt.Errorf("interrupted; everything the run created was removed: %w", err))
	}
	return withExit(ExitInfra, err)
}

func openStore(dir string) (*record.Store, error) {
	if dir == "" {
		d, err := record.DefaultStateDir()
		if err != nil {
			return nil, withExit(ExitInfra, err)
		}
		dir = d
	}
	s, err := record.OpenStore(dir)
	if err != nil {
		return nil, withExit(ExitInfra, fmt.Errorf("open state directory %s: %w", dir, err))
	}
	return s, nil
}

// printSummary prints a table of the steps: status, exit code, duration,
// peak memory and CPU time.
func printSummary(w io.Writer, res *pipeline.Result) {
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

// kvmProbe is the per-boot cached KVM probe of the vm backend.
func kvmProbe(string) pipeline.KVMProbe {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return func(context.Context) (bool, string) { return false, "/dev/kvm does not exist" }
	}
	return vm.ProbeKVM
}

// vmBackend is the vm backend where qemu is installed.
func vmBackend(h pipeline.Host) vmrunner.Backend {
	if !h.QEMU {
		return nil
	}
	return vm.New(vm.Options{
		Probe: func(context.Context) (bool, string) { return h.KVMUsable, h.KVMReason },
		Warn:  io.Discard, // apply shows its own warning as a progress event
	})
}
