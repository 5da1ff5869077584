package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
)

type gcOptions struct {
	StateDir string
}

func newGCCmd(stdio Stdio) *cobra.Command {
	var opts gcOptions
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove what applies killed with SIGKILL left behind",
		Long: `gc removes the cgroups, network namespaces, jail directories, workspace
mounts and their loop devices, and run directories of applies that are no
longer running (killed with SIGKILL, or a crash). Each apply lists what it creates in a state file before creating it;
runs still alive are left alone. Directories are never removed through a
mount. Run directories (workspaces, logs) live in the state directory: pass
the same --state-dir the applies used. There gc also removes workspace
templates (quota-templates/) that no apply will use: those of dead
processes' unfinished makes, torn ones, and those of an older mkfs.ext4;
and admission decisions (policy-cache/) of other agentsandbox binaries or
unused for 30 days; and the snapshots of serve's sandboxes that have
stopped (a server collects them itself, but not when it was killed),
leaving those of sandboxes with a journal (running under a server) alone.` + exitStatusHelp,
		Example: "  agentsandbox gc\n  agentsandbox gc --state-dir /srv/agentsandbox",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runGC(cmd.Context(), stdio, opts)
		},
	}
	cmd.Flags().StringVar(&opts.StateDir, "state-dir", "", "the state directory the applies used (default $XDG_STATE_HOME/agentsandbox, /var/lib/agentsandbox for root)")
	return cmd
}

// decisionCacheMaxAge is how long gc keeps an admission decision no
// command has used.
const decisionCacheMaxAge = 30 * 24 * time.Hour

func runGC(_ context.Context, stdio Stdio, opts gcOptions) error {
	// Without the state directory there are no run directories to clean,
	// but the host's state files still are.
	var runRoot string
	store, serr := openStore(opts.StateDir)
	if serr == nil {
		runRoot = filepath.Join(store.Dir(), "runs")
	}
	removed, err := hoststate.GC("", runRoot)
	if serr != nil {
		return errors.Join(err, serr)
	}
	decisions, derr := policy.GCDecisionCache(policyCacheDir(store.Dir()), decisionCacheMaxAge)
	removed, err = append(removed, decisions...), errors.Join(err, derr)
	snapshots, serr := sandboxes.CollectSnapshots(store)
	removed, err = append(removed, snapshots...), errors.Join(err, serr)
	for _, r := range removed {
		fmt.Fprintf(stdio.Out, "removed %s\n", r)
	}
	if len(removed) == 0 {
		fmt.Fprintln(stdio.Out, "nothing to remove")
	}
	if err != nil {
		return err
	}
	return nil
}
