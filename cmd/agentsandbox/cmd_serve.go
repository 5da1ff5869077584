package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/inputs"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server"
	"github.com/agentsandbox/agentsandbox/server/e2b"
	mcpserver "github.com/agentsandbox/agentsandbox/server/mcp"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/vmrunner/namespace"
	"github.com/agentsandbox/agentsandbox/workflow"
)

type serveOptions struct {
	StateDir     string
	Socket       string
	Listen       string
	TokenFile    string
	Identities   string
	MaxConns     int
	BodyTimeout  time.Duration
	Templates    string
	MaxSandboxes int
	MaxRuns      int
	Warm         int
	WarmTemplate []string // FILE#STEP=N
	DefaultTTL   time.Duration
	DefaultIdle  time.Duration
	ExecLogLimit string // a size, such as 256MiB
	// Snapshot quotas: per sandbox, and of every running sandbox.
	MaxSnapshots       int
	MaxSnapshotBytes   string
	SnapshotStoreBytes string
	Policy             policyOptions
	Share              nixShareFlags // substituters, builders, a cache to push to
	Store              string        // the shared store's URL (--store)
}

// socketName is the server's default unix socket in the state directory,
// and decisionLogName its log of action decisions.
const (
	socketName      = "serve.sock"
	decisionLogName = "serve-decisions.log"
)

func newServeCmd(stdio Stdio) *cobra.Command {
	var opts serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve long-lived sandboxes to agents over a REST API (docs/api.md)",
		Long: `serve gives agents sandboxes to work in: create one (from a step's fields or a
workflow step as a template), run commands in it many times (output streamed as
NDJSON), read and write its files, and kill it. Each sandbox is a namespace jail
set up exactly like an apply's step (policy admission, quotas, egress), and
every command and file write is appended to its execution record, closed when
the sandbox ends (records show, verify).

It listens on a unix socket in the state directory (0600, for the user who
runs it), where the caller is the peer's uid (uid 0 is an admin, uid N the
user uid-N), and with --listen ADDR on TCP too, where every request needs the
token of an identity: --identities FILE lists them (a name, the SHA-256 of its
token, its role, user or admin, and its limits; docs/api.md), or --token-file
holds one token, the user identity "token" (never give a token on the command
line). Both files must be regular files of the server's user that no one else
can read or write. Every sandbox, run, record and snapshot belongs to the
identity that made it: another identity gets 404, an admin sees all. The same
sandboxes are offered to MCP clients over streamable HTTP at /mcp, behind the
same authentication (docs/mcp.md; agentsandbox mcp serves them on stdio), and to
the unmodified E2B SDK with E2B_API_URL and E2B_SANDBOX_URL set to the TCP
address and E2B_API_KEY to a token (docs/e2b.md). SIGINT or SIGTERM drains the
requests in flight, then stops every sandbox and writes their records. At
start it removes what a server killed with SIGKILL left behind (as gc does).

Every action in a sandbox (create, exec, file read, write, list, remove,
snapshot, restore) is judged by the policy's deny_action rules (docs/policy.md)
and logged to STATE-DIR/serve-decisions.log (0600, appended to) as OPA
decision log events, as is the admission of every sandbox's workflow.
SIGHUP reloads the policy from the same --policy and --policy-data sources:
the next action and create are judged by it, and the sandboxes keep running.
A policy that fails to load is reported and the one in force stays.

Each listener holds at most --max-connections connections (1024; one more
is answered 429 and closed), a request's headers must arrive within 10s,
and a body that sends nothing for --body-timeout (30s) is answered 408 and
its connection closed (docs/api.md).

A sandbox holds at most --max-snapshots snapshots of --max-snapshot-bytes
(their NARs), and the running sandboxes together --snapshot-store-bytes; a
sandbox's snapshots are removed when it stops, unless another running
sandbox took the same tree.

--warm N keeps N sandboxes of the default spec ('{}') opened ahead, and
--warm-template FILE#STEP=N as many of a template: a create that asks for
the same sandbox gets one at once, and the pool opens the next in the
background. Warm sandboxes hold their jail, workspace and namespaces while
they wait, count against --max-sandboxes, and are admitted by the policy in
force (a reload replaces them, as does an edit of the template).` + exitStatusHelp,
		Example: `  agentsandbox serve
  curl --unix-socket ~/.local/state/agentsandbox/serve.sock -X POST http://sandbox/v1/sandboxes -d '{}'
  agentsandbox serve --listen 127.0.0.1:8723 --token-file /etc/agentsandbox/token
  agentsandbox serve --listen 127.0.0.1:8723 --identities /etc/agentsandbox/identities.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runServe(cmd.Context(), stdio, opts)
		},
	}
	f := cmd.Flags()
	opts.addManagerFlags(f)
	f.StringVar(&opts.Socket, "socket", "", "unix socket to listen on (default STATE-DIR/"+socketName+")")
	f.StringVar(&opts.Listen, "listen", "", "also listen on this TCP address, such as 127.0.0.1:8723 (needs --identities or --token-file)")
	f.StringVar(&opts.TokenFile, "token-file", "", "file holding the one token TCP clients send, the user identity \"token\" (mode 0600)")
	f.StringVar(&opts.Identities, "identities", "", "YAML file of the identities TCP clients authenticate as: name, token_sha256, role, limits (mode 0600; docs/api.md)")
	f.IntVar(&opts.MaxConns, "max-connections", server.DefaultMaxConnections, "most connections open at once on each listener (the unix socket, --listen); one more is answered 429 and closed")
	f.DurationVar(&opts.BodyTimeout, "body-timeout", server.DefaultBodyTimeout, "longest wait for the next bytes of a request's body; a body that stops arriving is answered 408")
	return cmd
}

// check refuses flag values the manager cannot take, before anything
// else (the root check included).
func (opts serveOptions) check() error {
	if _, err := opts.execLogLimit(); err != nil {
		return err
	}
	if _, _, err := opts.snapshotQuotas(); err != nil {
		return err
	}
	_, err := opts.warmSpecs()
	return err
}

// execLogLimit is --exec-log-limit in bytes.
func (opts serveOptions) execLogLimit() (int64, error) {
	n, err := workflow.ParseSize(opts.ExecLogLimit)
	if err != nil || n < 1<<20 {
		return 0, invalidf("--exec-log-limit %q: want a size of 1MiB or more, such as 256MiB or 1GiB", opts.ExecLogLimit)
	}
	return n, nil
}

// snapshotQuotas are --max-snapshot-bytes and --snapshot-store-bytes.
func (opts serveOptions) snapshotQuotas() (perSandbox, all int64, err error) {
	if opts.MaxSnapshots < 1 {
		return 0, 0, invalidf("--max-snapshots %d: want 1 or more", opts.MaxSnapshots)
	}
	for _, q := range []struct {
		flag, v string
		to      *int64
	}{{"--max-snapshot-bytes", opts.MaxSnapshotBytes, &perSandbox}, {"--snapshot-store-bytes", opts.SnapshotStoreBytes, &all}} {
		n, err := workflow.ParseSize(q.v)
		if err != nil || n < 1 {
			return 0, 0, invalidf("%s %q: want a size such as 4GiB", q.flag, q.v)
		}
		*q.to = n
	}
	return perSandbox, all, nil
}

// checkHTTP refuses the HTTP server's flags (serve's, not mcp's) that it
// cannot take.
func (opts serveOptions) checkHTTP() error {
	if opts.MaxConns < 1 {
		return invalidf("--max-connections %d: want 1 or more", opts.MaxConns)
	}
	if opts.BodyTimeout <= 0 {
		return invalidf("--body-timeout %s: want a positive duration, such as 30s", opts.BodyTimeout)
	}
	return nil
}

// warmSpecs are the pools --warm and --warm-template ask for.
func (opts serveOptions) warmSpecs() ([]sandboxes.WarmSpec, error) {
	if opts.Warm < 0 || opts.Warm > opts.MaxSandboxes {
		return nil, invalidf("--warm %d: want 0 to --max-sandboxes (%d)", opts.Warm, opts.MaxSandboxes)
	}
	var specs []sandboxes.WarmSpec
	total := opts.Warm
	if opts.Warm > 0 {
		specs = append(specs, sandboxes.WarmSpec{N: opts.Warm})
	}
	for _, v := range opts.WarmTemplate {
		ref, count, ok := strings.Cut(v, "=")
		n, err := strconv.Atoi(count)
		if !ok || err != nil || n < 1 || !strings.Contains(ref, "#") {
			return nil, invalidf("--warm-template %q: want FILE#STEP=N, such as ci.yaml#test=2", v)
		}
		if opts.Templates == "" {
			return nil, invalidf("--warm-template %q: needs --templates DIR, where the file is", v)
		}
		specs = append(specs, sandboxes.WarmSpec{Spec: sandboxes.Spec{Template: ref}, N: n})
		total += n
	}
	if total > opts.MaxSandboxes {
		return nil, invalidf("--warm and --warm-template ask for %d warm sandboxes, over --max-sandboxes (%d)", total, opts.MaxSandboxes)
	}
	return specs, nil
}

func runServe(ctx context.Context, stdio Stdio, opts serveOptions) error {
	hup := catchHangup() // from the start: one sent while starting must not kill it
	defer hup.stop()
	if err := errors.Join(opts.check(), opts.checkHTTP()); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("serve runs sandboxes as namespace jails, which needs root: run it as root (sudo agentsandbox serve)")
	}
	token, ids, err := opts.tcpIdentities()
	if err != nil {
		return err
	}
	mgr, store, closeLog, err := newServeManager(ctx, stdio, opts)
	if err != nil {
		return err
	}
	defer closeLog()
	defer hup.reloadPolicy(ctx, stdio, opts.Policy, mgr)()
	mcpServer := mcpserver.New(mgr, toolVersion(), mcpserver.Options{Records: store})
	logf := func(format string, args ...any) { fmt.Fprintf(stdio.Err, format+"\n", args...) }
	srv, err := server.New(server.Options{Manager: mgr, Token: token, Identities: ids, Version: toolVersion(),
		MaxConnections: opts.MaxConns, BodyTimeout: opts.BodyTimeout,
		Logf:       logf,
		Extra:      map[string]http.Handler{"/mcp": mcpserver.HTTPHandler(mcpServer)},
		Transports: e2b.New(mgr, e2b.Options{Logf: logf}).Transports()}) // E2B's control API and envd (docs/e2b.md)
	if err != nil {
		return errors.Join(err, mgr.Close(context.Background()))
	}
	socket := opts.Socket
	if socket == "" {
		socket = filepath.Join(store.Dir(), socketName)
	}
	// Listen before saying so: a client that reads the line can connect.
	ul, err := server.ListenUnix(socket)
	if err != nil {
		return errors.Join(err, mgr.Close(context.Background()))
	}
	var tl net.Listener
	if opts.Listen != "" {
		if tl, err = srv.ListenTCP(opts.Listen); err != nil {
			ul.Close()
			return errors.Join(fmt.Errorf("--listen: %w", err), mgr.Close(context.Background()))
		}
	}
	errs := make(chan error, 2)
	go func() { errs <- srv.Serve(ul) }()
	fmt.Fprintf(stdio.Err, "serving on unix socket %s\n", socket)
	if tl != nil {
		go func() { errs <- srv.Serve(tl) }()
		if opts.TokenFile != "" {
			fmt.Fprintf(stdio.Err, "serving on tcp %s (the identity %q, its token from %s)\n", tl.Addr(), server.TokenIdentity, opts.TokenFile)
		} else {
			fmt.Fprintf(stdio.Err, "serving on tcp %s (%d identities from %s)\n", tl.Addr(), len(ids), opts.Identities)
		}
	}
	sig, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var serveErr error
	select {
	case <-sig.Done():
		fmt.Fprintln(stdio.Err, "stopping: draining requests, then stopping every sandbox")
	case serveErr = <-errs:
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		serveErr = errors.Join(serveErr, err)
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// tcpIdentities reads who may call on TCP: the one token of
// --token-file, or the identities of --identities.
func (opts serveOptions) tcpIdentities() (string, []server.Identity, error) {
	switch {
	case opts.TokenFile != "" && opts.Identities != "":
		return "", nil, invalidf("give --identities or --token-file, not both: put the token's SHA-256 in an identity of the file")
	case opts.Listen == "" && (opts.TokenFile != "" || opts.Identities != ""):
		return "", nil, invalidf("--token-file and --identities are for TCP clients: give --listen ADDR too")
	case opts.Listen == "":
		return "", nil, nil
	case opts.Identities != "":
		ids, err := server.LoadIdentities(opts.Identities)
		if err != nil {
			return "", nil, invalid(fmt.Errorf("--identities: %w", err))
		}
		return "", ids, nil
	case opts.TokenFile == "":
		return "", nil, invalidf("--listen needs --identities or --token-file: a TCP client must send a token (write a long random one to a file only you can read, mode 0600)")
	}
	b, err := server.ReadSecretFile(opts.TokenFile, 4096)
	if err != nil {
		return "", nil, invalid(fmt.Errorf("--token-file: %w", err))
	}
	token := strings.TrimSpace(string(b))
	if len(token) < 16 {
		return "", nil, invalidf("--token-file %s: the token is %d characters; use at least 16 random ones", opts.TokenFile, len(token))
	}
	return token, nil, nil
}

// newServeManager opens the state directory, removes what a killed server
// left, and starts the sandbox manager that serve and mcp share, with its
// decision log STATE-DIR/serve-decisions.log open; closeLog closes that
// log, after the manager is closed.
func newServeManager(ctx context.Context, stdio Stdio, opts serveOptions) (_ sandboxes.Manager, _ *record.Store, closeLog func(), err error) {
	warm, err := opts.warmSpecs()
	if err != nil {
		return nil, nil, nil, err
	}
	snapBytes, snapStore, err := opts.snapshotQuotas()
	if err != nil {
		return nil, nil, nil, err
	}
	if opts.Templates != "" {
		abs, err := filepath.Abs(opts.Templates)
		if err != nil {
			return nil, nil, nil, invalidf("--templates: %v", err)
		}
		opts.Templates = abs
	}
	share, err := opts.Share.Sharing()
	if err != nil {
		return nil, nil, nil, err
	}
	remote, err := openRemote(opts.Store)
	if err != nil {
		return nil, nil, nil, err
	}
	if remote != nil {
		fmt.Fprintf(stdio.Err, "every record is pushed to %s (docs/store.md)\n", remote)
	}
	store, err := openStore(opts.StateDir)
	if err != nil {
		return nil, nil, nil, err
	}
	runRoot := filepath.Join(store.Dir(), "runs")
	// What a server (or an apply) killed with SIGKILL left: its sandboxes
	// died with it (their agents have a parent-death signal).
	if removed, err := hoststate.GC("", runRoot); err != nil {
		fmt.Fprintf(stdio.Err, "warning: cleaning what earlier runs left: %v\n", err)
	} else {
		for _, r := range removed {
			fmt.Fprintf(stdio.Err, "removed %s\n", r)
		}
	}
	host := engine.ProbeHost(ctx, kvmProbeFor("auto"))
	// An API caller's sandbox or run may ask for no more than this host
	// has (the policy's host_ceilings), judged at each admission.
	host.Capacity = engine.CapacityOf(runRoot, func(format string, args ...any) { fmt.Fprintf(stdio.Err, "warning: "+format+"\n", args...) })
	pol, err := loadPolicy(ctx, opts.Policy, "")
	if err != nil {
		return nil, nil, nil, err
	}
	// The manager fetches inputs from --templates: the operator's
	// workflows as apply would, an API caller's inline ones under the
	// policy's api_inputs.
	fetcher := &inputs.Fetcher{Store: store, Limits: inputs.DefaultLimits, AllowOutside: opts.Policy.AllowOutsideInputs}
	backends := map[workflow.Isolation]vmrunner.Backend{workflow.IsolationNamespace: namespace.New(namespace.Options{})}
	// VM sandboxes where qemu is installed: their session channel is a
	// virtio-serial port, which only qemu runners have.
	if vmb := vmBackend(host, "", func(line string) { fmt.Fprintf(stdio.Err, "warning: %s\n", line) }); vmb != nil {
		backends[workflow.IsolationVM] = vmb
	}
	logLimit, err := opts.execLogLimit()
	if err != nil {
		return nil, nil, nil, err
	}
	dlog, err := openDecisionLog(store.Dir())
	if err != nil {
		return nil, nil, nil, err
	}
	defer func() {
		if err != nil {
			dlog.Close()
		}
	}()
	mo := sandboxes.Options{
		Engine: engine.Options{
			Jobs: 1, Host: host, Store: store, RunRoot: runRoot,
			Backends: backends,
			Policy:   pol, ToolVersion: toolVersion(),
		},
		Inputs:      fetcher,
		TemplateDir: opts.Templates, MaxSandboxes: opts.MaxSandboxes, MaxRuns: opts.MaxRuns, Warm: warm,
		DefaultTTL: opts.DefaultTTL, DefaultIdle: opts.DefaultIdle, LogLimit: logLimit,
		MaxSnapshots: opts.MaxSnapshots, MaxSnapshotBytes: snapBytes, SnapshotStoreBytes: snapStore,
		Logf:        func(format string, args ...any) { fmt.Fprintf(stdio.Err, format+"\n", args...) },
		DecisionLog: dlog,
		Remote:      remote,
	}
	if host.Nix {
		mo.Realiser = func(w *workflow.Workflow, path string) engine.RealiseFunc {
			nr := &engine.NixRealiser{Workflow: w, WorkflowPath: path, GenDir: engine.GenDirFor(store.Dir(), w), KVM: host.KVMUsable, KVMReason: host.KVMReason, Share: share, Stderr: io.Discard}
			return nr.Realise
		}
	}
	mgr, err := sandboxes.New(mo)
	if sandboxes.CodeOf(err) == sandboxes.CodeBadRequest { // a warm pool's spec
		return nil, nil, nil, invalid(err)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	return mgr, store, func() { dlog.Close() }, nil
}

// openDecisionLog opens STATE-DIR/serve-decisions.log to append to,
// made 0600 when it is new. Anything there but a regular file (a symlink,
// a FIFO that would block the server) is refused.
func openDecisionLog(stateDir string) (*os.File, error) {
	path := filepath.Join(stateDir, decisionLogName)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the decision log: %w", err)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s is a %s, not a regular file; move it away", path, st.Mode().Type())
		}
		return nil, fmt.Errorf("open the decision log: %w", err)
	}
	return f, nil
}

// hangup catches SIGHUP, whose default would end the process and leave
// its sandboxes (netns, mounts, loop devices, run directories) behind.
type hangup chan os.Signal

func catchHangup() hangup {
	h := make(hangup, 1)
	signal.Notify(h, syscall.SIGHUP)
	return h
}

func (h hangup) stop() { signal.Stop(h) }

// reloadPolicy reloads mgr's policy from the sources opts names on every
// SIGHUP, until the returned function is called (which waits for a reload
// under way). A policy that fails to load keeps the one in force.
func (h hangup) reloadPolicy(ctx context.Context, stdio Stdio, opts policyOptions, mgr sandboxes.Manager) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-h:
			}
			setter, ok := mgr.(sandboxes.PolicySetter)
			if !ok {
				fmt.Fprintln(stdio.Err, "SIGHUP: this server cannot replace its policy")
				continue
			}
			pol, err := loadPolicy(ctx, opts, "")
			if err != nil {
				fmt.Fprintf(stdio.Err, "SIGHUP: policy reload failed; the policy in force stays: %v\n", err)
				continue
			}
			setter.SetPolicy(pol)
			fmt.Fprintf(stdio.Err, "SIGHUP: policy reloaded (bundle %s)\n", pol.BundleDigest())
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// addManagerFlags adds the flags of the sandbox manager serve and mcp share.
func (opts *serveOptions) addManagerFlags(f *pflag.FlagSet) {
	f.StringVar(&opts.StateDir, "state-dir", "", "where records, blobs and sandbox directories live (default $XDG_STATE_HOME/agentsandbox, /var/lib/agentsandbox for root)")
	f.StringVar(&opts.Templates, "templates", "", "directory of workflow files a sandbox spec may name as templates (FILE#STEP)")
	f.IntVar(&opts.MaxSandboxes, "max-sandboxes", 32, "most sandboxes running at once")
	f.IntVar(&opts.MaxRuns, "max-runs", 4, "most workflows run at once (POST /v1/runs, the MCP tool run_workflow)")
	f.IntVar(&opts.Warm, "warm", 0, "sandboxes of the default spec kept opened ahead for creates of '{}' (0: none)")
	f.StringArrayVar(&opts.WarmTemplate, "warm-template", nil, "FILE#STEP=N: N sandboxes of that template (in --templates) kept opened ahead (repeatable)")
	f.DurationVar(&opts.DefaultTTL, "default-ttl", time.Hour, "a sandbox's lifetime when its spec gives none")
	f.DurationVar(&opts.DefaultIdle, "default-idle", 15*time.Minute, "a sandbox's idle timeout when its spec gives none")
	f.StringVar(&opts.ExecLogLimit, "exec-log-limit", "256MiB", "how much of each stream of a command's output is kept (on disk, in the record) for readers to read later; past it, output reaches only a reader that keeps up")
	f.IntVar(&opts.MaxSnapshots, "max-snapshots", sandboxes.DefaultMaxSnapshots, "most snapshots (distinct trees) one sandbox holds; a sandbox's snapshots go when it stops")
	f.StringVar(&opts.MaxSnapshotBytes, "max-snapshot-bytes", workflow.FormatSize(sandboxes.DefaultMaxSnapshotBytes), "most bytes the snapshots of one sandbox hold (their NARs: every byte of every file, sparse holes too)")
	f.StringVar(&opts.SnapshotStoreBytes, "snapshot-store-bytes", workflow.FormatSize(sandboxes.DefaultSnapshotStoreBytes), "most bytes the snapshots of every running sandbox hold together")
	opts.Policy.AddFlags(f)
	opts.Share.AddFlags(f)
	addStoreFlag(f, &opts.Store)
}
