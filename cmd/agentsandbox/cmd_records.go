package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/fsx/jobfs"
	"github.com/agentsandbox/agentsandbox/record"
)

type recordsOptions struct {
	StateDir string
	Store    string // the shared store's URL (--store)
	JSON     bool
	To       string
	// Attestation and Key: records verify also checks this attestation
	// (records attest) with this public key.
	Attestation string
	Key         string
}

func newRecordsCmd(stdio Stdio) *cobra.Command {
	var opts recordsOptions
	cmd := &cobra.Command{
		Use:   "records",
		Short: "List, show, verify and export execution records",
		Long: `Every apply writes an execution record: canonical JSON whose id is its sha256
in Nix base32. IDs may be abbreviated to a unique prefix, like git's.` + exitStatusHelp,
		Example: `  agentsandbox records list
  agentsandbox records show 1b9x
  agentsandbox records verify 1b9x
  agentsandbox records export 1b9x --to out/
  agentsandbox records net 1b9x
  agentsandbox records diff 1b9x 0zq4`,
	}
	cmd.PersistentFlags().StringVar(&opts.StateDir, "state-dir", "", "where records and blobs live (default $XDG_STATE_HOME/agentsandbox, /var/lib/agentsandbox for root)")
	addStoreFlag(cmd.PersistentFlags(), &opts.Store)
	list := &cobra.Command{
		Use: "list", Short: "List runs, newest first", Args: cobra.NoArgs,
		Long:    "list prints one line per record, newest first: id, workflow, status, start and duration.\nA record that fails its hash check is listed as unreadable." + exitStatusHelp,
		Example: "  agentsandbox records list",
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRecordsList(cmd.Context(), stdio, opts)
		},
	}
	show := &cobra.Command{
		Use: "show ID", Short: "Print a summary of a record (--json: the record itself)", Args: cobra.ExactArgs(1),
		Long:    "show verifies the record's hash, then prints a summary of the run and each step,\nor with --json the canonical record bytes." + exitStatusHelp,
		Example: "  agentsandbox records show 1b9x\n  agentsandbox records show --json 1b9x",
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRecordsShow(cmd.Context(), stdio, opts, args)
		},
	}
	show.Flags().BoolVar(&opts.JSON, "json", false, "print the canonical record")
	verify := &cobra.Command{
		Use: "verify ID", Short: "Re-hash a record and every blob it references", Args: cobra.ExactArgs(1),
		Long: `verify re-hashes the record and every blob it references (workflow file,
inputs, job specs, logs, outputs) and names each mismatch. Exit status 1 when
anything differs.

With --attestation FILE --key PUB it also checks an attestation of the run
(records attest): the DSSE signature with PUB, the payload, statement and
predicate types, that it is of this record, and that its subjects are exactly
the files and NAR hashes of the record's outputs in the store now.` + exitStatusHelp,
		Example: "  agentsandbox records verify 1b9x\n  agentsandbox records verify 1b9x --attestation 1b9x.intoto.json --key signing.pub",
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRecordsVerify(cmd.Context(), stdio, opts, args)
		},
	}
	verify.Flags().StringVar(&opts.Attestation, "attestation", "", "also check this attestation of the run (records attest); needs --key")
	verify.Flags().StringVar(&opts.Key, "key", "", "the public key (PKIX PEM) the attestation must be signed with")
	export := &cobra.Command{
		Use: "export ID --to DIR", Short: "Restore a run's outputs from their NARs into DIR/STEP/PATH", Args: cobra.ExactArgs(1),
		Long:    "export restores every declared output of the run from its NAR in the blob store\n(verified on the way) into DIR/STEP/PATH, never overwriting and never writing\nthrough a symlink. A record whose outputs nest, share a path or leave DIR\n(records verify calls them unsafe) is refused before anything is written." + exitStatusHelp,
		Example: "  agentsandbox records export 1b9x --to out/\n  nix hash path out/train/model.bin   # equals the record's narHash",
		RunE: func(cmd *cobra.Command, args []string) error {
			// Checked here, not with cobra's MarkFlagRequired, whose error
			// bypasses the usage exit status.
			if opts.To == "" {
				return invalidf("records export: --to DIR is required: the directory to restore the outputs into")
			}
			return runRecordsExport(cmd.Context(), stdio, opts, args)
		},
	}
	export.Flags().StringVar(&opts.To, "to", "", "directory to restore into (required)")
	net := newRecordsNetCmd(stdio, &opts)
	push, pull := newRecordsPushCmd(stdio, &opts), newRecordsPullCmd(stdio, &opts)
	for _, c := range []*cobra.Command{list, show, verify, export, net, push, pull} {
		c.Args = wrapArgs(c.Args)
	}
	cmd.AddCommand(list, show, verify, export, net, push, pull)
	cmd.AddCommand(newRecordsDiffCmd(stdio, &opts))
	attest := newRecordsAttestCmd(stdio, &opts)
	attest.Args = wrapArgs(attest.Args)
	cmd.AddCommand(attest)
	return cmd
}

// resolveRecord opens the state directory and resolves prefix there, or
// in the shared store (--store), pulling the record it names.
func resolveRecord(ctx context.Context, stdio Stdio, opts recordsOptions, prefix string) (*record.Store, record.ID, error) {
	s, err := openStore(opts.StateDir)
	if err != nil {
		return nil, record.ID{}, err
	}
	rm, err := openRemote(opts.Store)
	if err != nil {
		return nil, record.ID{}, err
	}
	id, err := resolveShared(ctx, stdio.Err, s, rm, prefix)
	if err != nil {
		return nil, id, err
	}
	return s, id, nil
}

func runRecordsList(_ context.Context, stdio Stdio, opts recordsOptions) error {
	s, err := openStore(opts.StateDir)
	if err != nil {
		return err
	}
	list, err := s.List()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdio.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tWORKFLOW\tSTATUS\tSTARTED\tDURATION")
	for _, r := range list {
		if r.Problem != "" {
			fmt.Fprintf(tw, "%s\t-\tunreadable: %s\t-\t-\n", r.ID, r.Problem)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, r.Workflow, r.Status,
			r.Started.Local().Format(time.DateTime), r.Duration.Round(time.Millisecond))
	}
	return tw.Flush()
}

func runRecordsShow(ctx context.Context, stdio Stdio, opts recordsOptions, args []string) error {
	s, id, err := resolveRecord(ctx, stdio, opts, args[0])
	if err != nil {
		return err
	}
	if opts.JSON {
		raw, err := s.GetRaw(id)
		if err != nil {
			return checkFailed(err)
		}
		if _, err := s.Get(id); err != nil { // verify before printing
			return checkFailed(err)
		}
		_, err = fmt.Fprintf(stdio.Out, "%s\n", raw)
		return err
	}
	r, err := s.Get(id)
	if err != nil {
		return checkFailed(err)
	}
	out := stdio.Out
	fmt.Fprintf(out, "record    %s\n", id)
	fmt.Fprintf(out, "workflow  %s (canonical %s, file %s)\n", r.Workflow.Name, r.Workflow.CanonicalHash, r.Workflow.FileDigest)
	fmt.Fprintf(out, "status    %s", r.Status)
	if r.Error != "" {
		fmt.Fprintf(out, ": %s", r.Error)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "started   %s (%s)\n", r.Started.Local().Format(time.RFC3339), r.Duration().Round(time.Millisecond))
	fmt.Fprintf(out, "tool      agentsandbox %s on %s/%s, kernel %s, cgroup %s, kvm usable %v\n",
		r.ToolVersion, "linux", r.Host.Arch, r.Host.Kernel, r.Host.CgroupMode, r.Host.KVMUsable)
	if r.Parent != nil {
		fmt.Fprintf(out, "parent    %s\n", r.Parent)
	}
	if r.Policy != nil {
		fmt.Fprintf(out, "policy    decision %s, bundle %s, %d warnings\n", r.Policy.DecisionID, r.Policy.BundleDigest, len(r.Policy.Warn))
		if r.Policy.DecisionLog != nil {
			fmt.Fprintf(out, "          decision log %s (OPA decision log lines)\n", r.Policy.DecisionLog)
		}
	}
	for _, in := range r.Inputs {
		fmt.Fprintf(out, "input     %s %s %s\n", in.Name, in.Digest, in.Source)
	}
	if sb := r.Sandbox; sb != nil {
		fmt.Fprintf(out, "sandbox   %s, ended: %s, %d actions\n", sb.ID, sb.Ended, len(sb.Entries))
		for _, e := range sb.Entries {
			fmt.Fprintf(out, "  %3d %s  %-11s %s  (%s)\n", e.Seq, e.Time.Local().Format("15:04:05.000"), e.Kind, e.Summary, e.Digest)
		}
	}
	for _, st := range r.Steps {
		fmt.Fprintf(out, "\nstep %s: %s", st.Name, st.Status)
		if st.Detail != "" {
			fmt.Fprintf(out, " (%s)", st.Detail)
		}
		fmt.Fprintln(out)
		if st.Status == record.StatusSkipped {
			continue
		}
		fmt.Fprintf(out, "  isolation %s", isoLabel(st))
		fmt.Fprintf(out, ", exit %d", st.ExitCode)
		if st.Signal != "" {
			fmt.Fprintf(out, ", signal %s", st.Signal)
		}
		fmt.Fprintf(out, ", %s\n", st.Finished.Sub(st.Started).Round(time.Millisecond))
		fmt.Fprintf(out, "  usage     peak memory %s, cpu %s, pids peak %d, oom kills %d, throttled %s\n",
			humanBytes(st.Usage.PeakMemoryBytes), time.Duration(st.Usage.CPUTimeNs).Round(time.Millisecond),
			st.Usage.PidsPeak, st.Usage.OOMKills, time.Duration(st.Usage.ThrottledNs).Round(time.Millisecond))
		if len(st.Closure) > 0 {
			fmt.Fprintf(out, "  closure   %d store paths\n", len(st.Closure))
		} else if st.HostRoot != nil {
			fmt.Fprintf(out, "  host root %s\n", st.HostRoot)
		}
		fmt.Fprintf(out, "  logs      stdout %s, stderr %s\n", st.Logs.Stdout, st.Logs.Stderr)
		for _, o := range st.Outputs {
			fmt.Fprintf(out, "  output    %s %s (%d bytes of NAR)\n", o.Path, o.NarHash, o.NarSize)
		}
		if n := st.Network; n != nil {
			fmt.Fprintf(out, "  network   allow %s: %d connections allowed, %d denied, %d failed; %d DNS queries (%d NXDOMAIN); %d packets dropped; %s out, %s in\n",
				strings.Join(n.Allow, ", "), n.Allowed, n.Denied, n.Failed, n.Queries, n.NXDomain, n.Dropped, humanBytes(n.BytesOut), humanBytes(n.BytesIn))
			if n.Denied > 0 {
				fmt.Fprintf(out, "            agentsandbox records net %s --step %s --denied   (what was blocked, and the entry that would allow it)\n", id, st.Name)
			}
		}
	}
	return nil
}

func runRecordsVerify(ctx context.Context, stdio Stdio, opts recordsOptions, args []string) error {
	if (opts.Attestation == "") != (opts.Key == "") {
		return invalidf("records verify: --attestation FILE and --key PUB go together")
	}
	s, id, err := resolveRecord(ctx, stdio, opts, args[0])
	if err != nil {
		return err
	}
	problems, err := s.Verify(id)
	if err != nil {
		return err
	}
	for _, p := range problems {
		label := "mismatch"
		if errors.Is(p.Err, record.ErrOutputLayout) {
			label = "unsafe" // blobs intact, but export would be refused
		}
		fmt.Fprintf(stdio.Err, "%s: %s\n", label, p)
	}
	n := len(problems)
	if opts.Attestation != "" {
		bad, err := verifyAttestation(ctx, stdio, s, id, opts)
		if err != nil {
			return err
		}
		n += bad
	}
	if n > 0 {
		return checkFailed(fmt.Errorf("record %s: %d problems", id, n))
	}
	_, err = fmt.Fprintf(stdio.Out, "%s: ok\n", id)
	return err
}

func runRecordsExport(ctx context.Context, stdio Stdio, opts recordsOptions, args []string) error {
	s, id, err := resolveRecord(ctx, stdio, opts, args[0])
	if err != nil {
		return err
	}
	// --to is the caller's own path: a symlink in it is theirs to follow.
	// Beneath it, jobfs follows none (what an output restored included).
	if err := os.MkdirAll(opts.To, 0o755); err != nil {
		return fmt.Errorf("records export: %w", err)
	}
	to, err := filepath.EvalSymlinks(opts.To)
	if err != nil {
		return fmt.Errorf("records export: %w", err)
	}
	dst, err := jobfs.OpenRestorer(to)
	if err != nil {
		return fmt.Errorf("records export: %w", err)
	}
	defer dst.Close()
	paths, err := s.Export(id, dst)
	for _, p := range paths {
		fmt.Fprintln(stdio.Out, filepath.Join(opts.To, filepath.FromSlash(p)))
	}
	if errors.Is(err, jobfs.ErrSymlink) {
		err = fmt.Errorf("%w (export writes nothing through a symlink: export into a new, empty --to)", err)
	}
	if errors.Is(err, record.ErrOutputLayout) || errors.Is(err, record.ErrHashMismatch) || errors.Is(err, jobfs.ErrSymlink) {
		// The store holds what no honest run wrote: a check failed.
		return checkFailed(err)
	}
	return err
}
