package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/sandboxes"
	mcpserver "github.com/agentsandbox/agentsandbox/server/mcp"
)

type mcpOptions struct {
	serveOptions
}

func newMCPCmd(stdio Stdio) *cobra.Command {
	var opts mcpOptions
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve sandboxes to an MCP client (such as Claude Desktop) on stdio (docs/mcp.md)",
		Long: `mcp is a Model Context Protocol server on standard input and output, for an
MCP client to start as a command. Its tools create sandboxes, run commands in
them, read, write and list their files, and kill them; execution records are
its resources. It runs its own sandbox manager, set up as serve's (same flags,
same state directory, the same policy and quotas), so it needs root like serve.
Its sandboxes end when the client closes the connection (or on SIGINT/SIGTERM),
and their records are written then. Its caller is whoever started it: the
identity uid-N of the process's uid, an admin for uid 0 (which sees the
records of serve's identities in the same state directory too). SIGHUP reloads the policy, as for serve;
decisions are logged to STATE-DIR/serve-decisions.log, as serve's are.

To offer the same tools over HTTP to several clients, run serve instead: it
serves MCP at /mcp.` + exitStatusHelp,
		Example: `  {"mcpServers": {"agentsandbox": {"command": "sudo", "args": ["agentsandbox", "mcp"]}}}
  agentsandbox mcp --templates ./workflows --max-sandboxes 4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runMCP(cmd.Context(), stdio, opts)
		},
	}
	opts.addManagerFlags(cmd.Flags())
	return cmd
}

func runMCP(ctx context.Context, stdio Stdio, opts mcpOptions) error {
	hup := catchHangup()
	defer hup.stop()
	if err := opts.check(); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("mcp runs sandboxes as namespace jails, which needs root: have the MCP client run it as root (command sudo, args [\"agentsandbox\", \"mcp\"])")
	}
	mgr, store, closeLog, err := newServeManager(ctx, stdio, opts.serveOptions)
	if err != nil {
		return err
	}
	defer closeLog()
	defer hup.reloadPolicy(ctx, stdio, opts.Policy, mgr)()
	who := stdioIdentity(os.Getuid())
	s := mcpserver.New(mgr, toolVersion(), mcpserver.Options{Records: store, Identity: &who})
	return serveMCP(ctx, stdio, s, mgr)
}

// stdioIdentity is the caller of mcp on stdio, the process's uid as
// serve's unix socket would see it: uid 0 is the admin uid-0, any other
// the user uid-N.
func stdioIdentity(uid int) sandboxes.Identity {
	return sandboxes.Identity{Name: "uid-" + strconv.Itoa(uid), Admin: uid == 0}
}

// serveMCP serves s on stdio until the client hangs up or a signal, then
// stops every sandbox of mgr.
func serveMCP(ctx context.Context, stdio Stdio, s *sdk.Server, mgr sandboxes.Manager) error {
	sig, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Fprintln(stdio.Err, "agentsandbox mcp: serving MCP on stdio")
	runErr := s.Run(sig, mcpserver.StdioTransport(stdio.In, stdio.Out))
	if sig.Err() != nil && ctx.Err() == nil {
		runErr = nil // a signal asked us to stop
	}
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := mgr.Close(closeCtx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("stop the sandboxes: %w", err))
	}
	if runErr != nil && !errors.Is(runErr, io.EOF) {
		return fmt.Errorf("serve MCP on stdio: %w", runErr)
	}
	return nil
}
