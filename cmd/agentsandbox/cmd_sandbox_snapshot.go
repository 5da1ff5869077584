package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server"
)

// sandbox snapshot and sandbox restore: the workspace saved as a
// content-addressed tree, and rolled back to it (docs/api.md, "Snapshots").

type sandboxSnapshotOptions struct {
	Conn  connOptions
	Label string
	List  bool
}

func newSandboxSnapshotCmd(stdio Stdio) *cobra.Command {
	var opts sandboxSnapshotOptions
	cmd := &cobra.Command{
		Use:   "snapshot ID",
		Short: "Save a sandbox's workspace and print the snapshot's id (--list: list its snapshots)",
		Long: `snapshot stores the sandbox's workspace as a content-addressed tree (the NAR of
its files) in the server's blob store and prints the snapshot's id, sha256:<hex>:
the same files always give the same id. "sandbox restore" rolls the sandbox back
to it, and "sandbox create --from-snapshot" starts a new sandbox from it. With
--list it prints the sandbox's snapshots instead.` + sandboxExitHelp,
		Example: `  SNAP=$(agentsandbox sandbox snapshot $ID --label "before the migration")
  agentsandbox sandbox snapshot $ID --list`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSandboxSnapshot(cmd.Context(), stdio, opts, args[0])
		},
	}
	f := cmd.Flags()
	opts.Conn.AddFlags(f)
	f.StringVar(&opts.Label, "label", "", "a note for people, kept with the snapshot")
	f.BoolVar(&opts.List, "list", false, "list the sandbox's snapshots instead of taking one")
	return cmd
}

func runSandboxSnapshot(ctx context.Context, stdio Stdio, opts sandboxSnapshotOptions, id string) error {
	c, err := opts.Conn.client()
	if err != nil {
		return err
	}
	if opts.List {
		if opts.Label != "" {
			return invalidf("--label names a new snapshot; it does not go with --list")
		}
		var list server.SnapshotList
		if err := c.json(ctx, "GET", sandboxPath(id, "snapshots"), nil, nil, &list); err != nil {
			return fmt.Errorf("list the snapshots of %s: %w", id, err)
		}
		tw := tabwriter.NewWriter(stdio.Out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tCREATED\tSIZE\tLABEL")
		for _, s := range list.Snapshots {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.ID, s.Created.Local().Format(time.DateTime), humanBytes(s.Size), s.Label)
		}
		return tw.Flush()
	}
	var snap sandboxes.SnapshotInfo
	if err := c.json(ctx, "POST", sandboxPath(id, "snapshots"), nil, sandboxes.SnapshotRequest{Label: opts.Label}, &snap); err != nil {
		return fmt.Errorf("snapshot %s: %w", id, err)
	}
	fmt.Fprintln(stdio.Out, snap.ID)
	return nil
}

func newSandboxRestoreCmd(stdio Stdio) *cobra.Command {
	var conn connOptions
	cmd := &cobra.Command{
		Use:   "restore ID SNAPSHOT",
		Short: "Roll a sandbox's workspace back to a snapshot",
		Long: `restore replaces the sandbox's workspace with the snapshot's files (a rollback
after a bad step). No command may be running in the sandbox. The restore is an
entry of the sandbox's record.` + sandboxExitHelp,
		Example: `  agentsandbox sandbox restore $ID $SNAP`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSandboxRestore(cmd.Context(), stdio, conn, args[0], args[1])
		},
	}
	conn.AddFlags(cmd.Flags())
	return cmd
}

func runSandboxRestore(ctx context.Context, stdio Stdio, conn connOptions, id, snap string) error {
	c, err := conn.client()
	if err != nil {
		return err
	}
	var info sandboxes.Info
	if err := c.json(ctx, "POST", sandboxPath(id, "restore"), nil, sandboxes.RestoreRequest{Snapshot: snap}, &info); err != nil {
		return fmt.Errorf("restore %s to %s: %w", id, snap, err)
	}
	fmt.Fprintf(stdio.Err, "restored %s to %s\n", id, snap)
	return nil
}
