package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

type sandboxNetworkOptions struct {
	Conn   connOptions
	Grant  []string
	Revoke []string
}

func newSandboxNetworkCmd(stdio Stdio) *cobra.Command {
	var opts sandboxNetworkOptions
	cmd := &cobra.Command{
		Use:   "network ID",
		Short: "Show, grant or revoke a running sandbox's network access",
		Long: `network prints the sandbox's network.allow and the policy's egress_deny in force
for it. --grant adds entries (host:port, *.domain:port, CIDR:port) and --revoke
removes entries it has; the next connection follows the new rules, and each
change is judged by the server's policy and recorded. Only a sandbox created
with --allow has network to change.` + sandboxExitHelp,
		Example: `  agentsandbox sandbox network $ID
  agentsandbox sandbox network $ID --grant pypi.org:443 --grant '*.pythonhosted.org:443'
  agentsandbox sandbox network $ID --revoke pypi.org:443`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSandboxNetwork(cmd.Context(), stdio, opts, args[0])
		},
	}
	f := cmd.Flags()
	opts.Conn.AddFlags(f)
	f.StringArrayVar(&opts.Grant, "grant", nil, "an entry to allow (repeatable)")
	f.StringArrayVar(&opts.Revoke, "revoke", nil, "an entry to remove (repeatable)")
	return cmd
}

func runSandboxNetwork(ctx context.Context, stdio Stdio, opts sandboxNetworkOptions, id string) error {
	c, err := opts.Conn.client()
	if err != nil {
		return err
	}
	var info sandboxes.NetworkInfo
	if len(opts.Grant) == 0 && len(opts.Revoke) == 0 {
		err = c.json(ctx, "GET", sandboxPath(id, "network"), nil, nil, &info)
	} else {
		err = c.json(ctx, "POST", sandboxPath(id, "network"), nil, sandboxes.NetworkUpdate{Grant: opts.Grant, Revoke: opts.Revoke}, &info)
	}
	if err != nil {
		return fmt.Errorf("network of %s: %w", id, err)
	}
	fmt.Fprintf(stdio.Out, "allow: %s\n", joinOrNone(info.Allow))
	if len(info.Deny) > 0 {
		fmt.Fprintf(stdio.Out, "deny (policy): %s\n", strings.Join(info.Deny, " "))
	}
	return nil
}

func joinOrNone(s []string) string {
	if len(s) == 0 {
		return "(none: no connection is allowed)"
	}
	return strings.Join(s, " ")
}
