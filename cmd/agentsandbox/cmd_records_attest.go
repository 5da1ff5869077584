package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/fsx/atomicfile"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/record/provenance"
	"github.com/agentsandbox/agentsandbox/workflow"
)

type recordsAttestOptions struct {
	recordsOptions
	Key    string
	Out    string
	Source string
}

// newRecordsAttestCmd is `records attest ID --key KEY`: signed SLSA
// provenance of a run.
func newRecordsAttestCmd(stdio Stdio, parent *recordsOptions) *cobra.Command {
	opts := recordsAttestOptions{}
	cmd := &cobra.Command{
		Use: "attest ID --key KEY [--out FILE]", Short: "Sign SLSA provenance of a run (an in-toto Statement in a DSSE envelope)", Args: cobra.ExactArgs(1),
		Long: `attest writes signed provenance of a run: an in-toto Statement v1 with a SLSA
provenance v1 predicate, in a DSSE envelope signed with KEY (from
'agentsandbox keygen': ECDSA P-256 or ed25519, PKCS#8 PEM).

Its subjects are every file of every output, named STEP/OUTPUT/PATH with the
sha256 of its bytes, and every output as a whole, named STEP/OUTPUT with its
NAR hash; all are read from the store's NARs, verified as they are read. The
predicate pins the workflow and what each step asked for (isolation, limits,
network, environment variable names, never values), how this host ran it,
the closures, inputs, host and kernel it ran on, and the record, logs and job
specs it left. docs/provenance.md describes every field.

The envelope goes to ID.intoto.json in the current directory, or --out FILE
(- for standard output). 'records verify ID --attestation FILE --key PUB'
checks it, and so does cosign verify-blob-attestation --type slsaprovenance1.` + exitStatusHelp,
		Example: `  agentsandbox keygen --out signing
  agentsandbox records attest 1b9x --key signing.key
  agentsandbox records attest 1b9x --key signing.key --out - | jq -r .payload | base64 -d | jq .subject
  agentsandbox records attest 1b9x --key signing.key --source git+https://git.example.org/ml.git@v1.2#train.yaml`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.recordsOptions = *parent
			return runRecordsAttest(cmd.Context(), stdio, opts, args)
		},
	}
	cmd.Flags().StringVar(&opts.Key, "key", "", "the private key to sign with, PKCS#8 PEM (required)")
	cmd.Flags().StringVar(&opts.Out, "out", "", "where to write the envelope (default ID.intoto.json; - for standard output)")
	cmd.Flags().StringVar(&opts.Source, "source", "", "where the workflow file came from, a URI put in externalParameters.workflow.source (the file is pinned by digest either way)")
	return cmd
}

func runRecordsAttest(ctx context.Context, stdio Stdio, opts recordsAttestOptions, args []string) error {
	if opts.Key == "" {
		return invalidf("records attest: --key KEY is required (agentsandbox keygen makes one)")
	}
	keyPEM, err := os.ReadFile(opts.Key)
	if err != nil {
		return invalid(fmt.Errorf("--key: %w", err))
	}
	key, err := provenance.ParsePrivateKey(keyPEM)
	if err != nil {
		return invalid(fmt.Errorf("--key %s: %w", opts.Key, err))
	}
	s, id, err := resolveRecord(ctx, stdio, opts.recordsOptions, args[0])
	if err != nil {
		return err
	}
	r, err := s.Get(id)
	if err != nil {
		return checkFailed(fmt.Errorf("attest %s: %w", id, err))
	}
	if r.Sandbox != nil {
		return invalid(fmt.Errorf("attest %s: the record of a long-lived sandbox (agentsandbox serve) has no workflow or outputs to attest; only apply's records can be attested", id))
	}
	if r.Status != record.StatusSucceeded {
		fmt.Fprintf(stdio.Err, "warning: run %s ended %s; the attestation says so (the record byproduct's status) and covers the outputs it left\n", id, r.Status)
	}
	w, warning, err := attestWorkflow(s, r, opts.Source)
	if err != nil {
		return checkFailed(fmt.Errorf("attest %s: %w", id, err))
	}
	if warning != "" {
		fmt.Fprintf(stdio.Err, "warning: %s\n", warning)
	}
	st, err := provenance.Build(s, id, w)
	switch {
	case errors.Is(err, provenance.ErrNoSubjects):
		return invalid(err)
	case errors.Is(err, record.ErrHashMismatch), errors.Is(err, record.ErrBlobMissing):
		return checkFailed(fmt.Errorf("%w (agentsandbox records verify %s names every damaged blob)", err, id))
	case err != nil:
		return err
	}
	env, err := provenance.Sign(ctx, st, key)
	if err != nil {
		return fmt.Errorf("attest %s: %w", id, err)
	}
	b, err := provenance.EncodeEnvelope(env)
	if err != nil {
		return fmt.Errorf("attest %s: %w", id, err)
	}
	if opts.Out == "-" {
		_, err := stdio.Out.Write(b)
		return err
	}
	out := opts.Out
	if out == "" {
		out = id.String() + ".intoto.json"
	}
	if err := atomicfile.WriteFile(out, b, 0o644); err != nil {
		return fmt.Errorf("attest %s: write %s: %w", id, out, err)
	}
	_, err = fmt.Fprintf(stdio.Out, "%s: %d subjects, signed by keyid %s\n%s\n", id, len(st.GetSubject()), env.Signatures[0].KeyID, out)
	return err
}

// attestWorkflow reads the workflow file the record pins and says what the
// attestation needs of it. When this version reads the file to another
// canonical hash than the record's, the steps' parameters would not be
// what ran: they are left out, with a warning.
func attestWorkflow(s *record.Store, r *record.Record, source string) (*provenance.Workflow, string, error) {
	raw, err := readBlob(s, r.Workflow.FileDigest)
	if err != nil {
		return nil, "", fmt.Errorf("read the recorded workflow file: %w", err)
	}
	pw := &provenance.Workflow{Source: source}
	// The run already fetched its inputs: where they were is not in question.
	w, err := workflow.Parse(r.Workflow.FileDigest.String(), raw, workflow.AllowOutsideInputs(true))
	if err != nil {
		return pw, fmt.Sprintf("this agentsandbox cannot parse the recorded workflow file (%v): the attestation leaves out its steps' parameters", firstLine(err.Error())), nil
	}
	if h := record.Digest(w.Hash()); h != r.Workflow.CanonicalHash {
		return pw, fmt.Sprintf("the workflow's canonical hash is now %s, the record has %s: the attestation leaves out its steps' parameters", h, r.Workflow.CanonicalHash), nil
	}
	for _, st := range w.Steps {
		envNames := make([]string, 0, len(st.Env))
		for k := range st.Env {
			envNames = append(envNames, k)
		}
		slices.Sort(envNames)
		res := st.Resources
		pw.Steps = append(pw.Steps, provenance.Step{
			Name: st.Name, Isolation: string(st.Isolation), Hypervisor: string(st.Hypervisor),
			Limits: provenance.Limits{
				VCPU: res.VCPU, MemoryBytes: res.Memory, PIDs: res.PIDs, DiskBytes: res.Disk, DiskInodes: res.DiskInodes,
				TimeoutMs: res.TimeoutMS, BandwidthBps: res.Bandwidth, IOReadBps: res.IOReadBps, IOWriteBps: res.IOWriteBps,
			},
			Network: st.Network.Allow, EnvNames: envNames, Needs: st.Needs, Inputs: st.Inputs,
			Outputs: st.Outputs, Packages: st.Packages,
		})
	}
	return pw, "", nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// verifyAttestation is the --attestation part of records verify: every
// problem goes to stderr as a "mismatch:" line, and their count is
// returned.
func verifyAttestation(ctx context.Context, stdio Stdio, s *record.Store, id record.ID, opts recordsOptions) (int, error) {
	if opts.Attestation == "" || opts.Key == "" {
		return 0, invalidf("records verify: --attestation FILE and --key PUB go together")
	}
	pubPEM, err := os.ReadFile(opts.Key)
	if err != nil {
		return 0, invalid(fmt.Errorf("--key: %w", err))
	}
	pub, err := provenance.ParsePublicKey(pubPEM)
	if err != nil {
		return 0, invalid(fmt.Errorf("--key %s: %w", opts.Key, err))
	}
	f, err := os.Open(opts.Attestation)
	if err != nil {
		return 0, invalid(fmt.Errorf("--attestation: %w", err))
	}
	defer f.Close()
	problems := provenance.Verify(ctx, s, id, f, pub)
	for _, p := range problems {
		fmt.Fprintf(stdio.Err, "mismatch: attestation %s: %s\n", opts.Attestation, p)
	}
	if len(problems) == 0 {
		keyID, _ := provenance.KeyID(pub)
		fmt.Fprintf(stdio.Out, "%s: attestation %s ok (signed by keyid %s)\n", id, opts.Attestation, keyID)
	}
	return len(problems), nil
}
