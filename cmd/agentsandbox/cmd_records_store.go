package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/record"
)

// newRecordsPushCmd and newRecordsPullCmd move a record and its blobs
// between the state directory and the shared store (--store).
func newRecordsPushCmd(stdio Stdio, opts *recordsOptions) *cobra.Command {
	return &cobra.Command{
		Use: "push ID", Short: "Send a record and every blob it names to the shared store (--store)", Args: cobra.ExactArgs(1),
		Long: `push sends the record and every blob it names (workflow file, inputs, job
specs, logs, outputs) to the shared store: the blobs first, the record last,
so the store never holds a record whose blobs it lacks. What the store has
already is not sent again. apply and rerun push the record they write when
--store is given; push sends one again after a failure (the record stays in
the state directory whatever happens to the push).` + exitStatusHelp,
		Example: "  agentsandbox records push 1b9x --store 's3://team-records/ci?endpoint=s3.internal:9000'",
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRecordsPush(cmd.Context(), stdio, *opts, args)
		},
	}
}

func newRecordsPullCmd(stdio Stdio, opts *recordsOptions) *cobra.Command {
	return &cobra.Command{
		Use: "pull ID", Short: "Fetch a record and every blob it names from the shared store (--store)", Args: cobra.ExactArgs(1),
		Long: `pull fetches the record and every blob it names that the state directory
lacks from the shared store, checking each against its hash: an object changed
in the store is refused (exit status 1) and nothing of the record is kept. ID
may be a unique prefix of an id in the store. show, verify, diff, export,
attest, net and rerun pull a record they do not find here on their own.` + exitStatusHelp,
		Example: "  agentsandbox records pull 1b9x --store 's3://team-records/ci?endpoint=s3.internal:9000'",
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRecordsPull(cmd.Context(), stdio, *opts, args)
		},
	}
}

func needRemote(opts recordsOptions, verb string) (*record.Store, record.Remote, error) {
	rm, err := openRemote(opts.Store)
	if err != nil {
		return nil, nil, err
	}
	if rm == nil {
		return nil, nil, invalidf("records %s: no shared store: pass --store URL or set $%s (docs/store.md)", verb, storeEnv)
	}
	s, err := openStore(opts.StateDir)
	if err != nil {
		return nil, nil, err
	}
	return s, rm, nil
}

func runRecordsPush(ctx context.Context, stdio Stdio, opts recordsOptions, args []string) error {
	s, rm, err := needRemote(opts, "push")
	if err != nil {
		return err
	}
	id, err := s.Resolve(args[0])
	if err != nil {
		return invalid(err)
	}
	err = pushRecord(ctx, stdio.Err, s, rm, id)
	if errors.Is(err, record.ErrBlobMissing) || errors.Is(err, record.ErrHashMismatch) {
		return checkFailed(err)
	}
	return err
}

func runRecordsPull(ctx context.Context, stdio Stdio, opts recordsOptions, args []string) error {
	s, rm, err := needRemote(opts, "pull")
	if err != nil {
		return err
	}
	id, err := s.Resolve(args[0])
	if err == nil {
		return pullRecord(ctx, stdio.Err, s, rm, id) // here already: says nothing
	}
	if !errors.Is(err, record.ErrNotFound) {
		return invalid(err)
	}
	id, err = record.ResolveRemote(ctx, rm, args[0])
	if errors.Is(err, record.ErrNotFound) || errors.Is(err, record.ErrAmbiguous) {
		return invalid(err)
	}
	if err != nil {
		return err
	}
	return pullRecord(ctx, stdio.Err, s, rm, id)
}
