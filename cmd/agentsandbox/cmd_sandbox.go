package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server"
)

const sandboxExitHelp = `

Exit status:
  0  success
  2  bad usage, or the server found the request wrong (bad_request)
  3  the server's policy refused (policy_denied)
  5  the server failed, could not be reached, or answered another error;
     sandbox exec: also when output was lost (the server no longer had it)
  N  sandbox exec: the command's own exit status (128+n when signal n ended it)`

type sandboxCreateOptions struct {
	Conn        connOptions
	Template    string
	Isolation   string
	Packages    []string
	Memory      string
	VCPU        int
	Bandwidth   string
	Labels      []string
	Env         []string
	Allow       []string
	TTL         time.Duration
	IdleTimeout time.Duration
}

// maxExecStdin bounds the stdin exec -i sends: the request is JSON of at
// most 1 MiB.
const maxExecStdin = 1<<20 - 64<<10

type sandboxExecOptions struct {
	Conn    connOptions
	Cwd     string
	Env     []string
	Timeout time.Duration
	Stdin   bool
}

func newSandboxCmd(stdio Stdio) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Create, use and kill the long-lived sandboxes of a running `agentsandbox serve`",
		Long: `sandbox talks to a running server (agentsandbox serve) the way an agent does
through the REST API (docs/api.md), for people: create a sandbox, run commands in
it with their output streamed live, copy files in and out, list its workspace,
and kill it, which closes its execution record.

The server is found by --socket or --url (with --token-file), else
$AGENTSANDBOX_SOCKET, else $AGENTSANDBOX_URL with $AGENTSANDBOX_TOKEN, else the
socket in the default state directory (/var/lib/agentsandbox/serve.sock for
root). The server shows and acts on the sandboxes of the caller's identity
only (its token's on TCP, its uid's on the socket; an admin's: all).` + sandboxExitHelp,
		Example: `  ID=$(agentsandbox sandbox create --label project=demo --ttl 2h)
  agentsandbox sandbox cp main.py $ID:src/main.py
  agentsandbox sandbox exec $ID -- python3 src/main.py
  agentsandbox sandbox files $ID src
  agentsandbox sandbox ls --label project=demo
  SNAP=$(agentsandbox sandbox snapshot $ID) && agentsandbox sandbox restore $ID $SNAP
  agentsandbox sandbox network $ID --grant pypi.org:443
  agentsandbox sandbox run ci.yaml
  agentsandbox sandbox rm $ID`,
	}
	cmd.AddCommand(newSandboxCreateCmd(stdio), newSandboxLsCmd(stdio), newSandboxExecCmd(stdio),
		newSandboxCpCmd(stdio), newSandboxFilesCmd(stdio), newSandboxRmCmd(stdio),
		newSandboxSnapshotCmd(stdio), newSandboxRestoreCmd(stdio), newSandboxNetworkCmd(stdio), newSandboxRunCmd(stdio))
	for _, c := range cmd.Commands() {
		c.Args = wrapArgs(c.Args)
	}
	return cmd
}

func newSandboxCreateCmd(stdio Stdio) *cobra.Command {
	var opts sandboxCreateOptions
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and print its id",
		Long: `create asks the server for a sandbox: from a workflow step as a template
(--template FILE#STEP, in the server's template directory), or from the fields
given here, which override the template's. It prints the sandbox's id.` + sandboxExitHelp,
		Example: `  agentsandbox sandbox create
  agentsandbox sandbox create --memory 1GiB --vcpu 2 --package python3 --allow pypi.org:443 --label owner=me
  agentsandbox sandbox create --template ci.yaml#test --ttl 30m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSandboxCreate(cmd.Context(), stdio, opts)
		},
	}
	f := cmd.Flags()
	opts.Conn.AddFlags(f)
	f.StringVar(&opts.Template, "template", "", "a workflow step to start from, FILE#STEP")
	f.StringVar(&opts.Isolation, "isolation", "", "namespace, vm or auto (default: the server's, namespace)")
	f.StringArrayVar(&opts.Packages, "package", nil, "a Nix package to have in the sandbox (repeatable)")
	f.StringVar(&opts.Memory, "memory", "", "memory limit, such as 512MiB or 2GiB")
	f.IntVar(&opts.VCPU, "vcpu", 0, "CPUs the sandbox may use")
	f.StringVar(&opts.Bandwidth, "bandwidth", "", "egress bandwidth limit with --allow, such as 100Mbit (the default policy requires one)")
	f.StringArrayVar(&opts.Labels, "label", nil, "a label K=V to find it by (repeatable)")
	f.StringArrayVar(&opts.Env, "env", nil, "an environment variable K=V of every command (repeatable)")
	f.StringArrayVar(&opts.Allow, "allow", nil, "a HOST:PORT, *.DOMAIN:PORT or CIDR:PORT the sandbox may reach (repeatable)")
	f.DurationVar(&opts.TTL, "ttl", 0, "end the sandbox this long after its creation (default: the server's, 1h)")
	f.DurationVar(&opts.IdleTimeout, "idle-timeout", 0, "end it after this long without a command or file action (default: the server's, 15m)")
	return cmd
}

// keyValues parses repeated K=V flags.
func keyValues(flag string, kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, invalidf("--%s %q: want KEY=VALUE", flag, kv)
		}
		m[k] = v
	}
	return m, nil
}

func runSandboxCreate(ctx context.Context, stdio Stdio, opts sandboxCreateOptions) error {
	spec := sandboxes.Spec{Template: opts.Template, Isolation: opts.Isolation, Packages: opts.Packages,
		TTL: sandboxes.Duration(opts.TTL), IdleTimeout: sandboxes.Duration(opts.IdleTimeout)}
	var err error
	if spec.Labels, err = keyValues("label", opts.Labels); err != nil {
		return err
	}
	if spec.Env, err = keyValues("env", opts.Env); err != nil {
		return err
	}
	if opts.Memory != "" || opts.VCPU != 0 || opts.Bandwidth != "" {
		spec.Resources = map[string]any{}
		if opts.Memory != "" {
			spec.Resources["memory"] = opts.Memory
		}
		if opts.Bandwidth != "" {
			spec.Resources["bandwidth"] = opts.Bandwidth
		}
		if opts.VCPU != 0 {
			spec.Resources["vcpu"] = opts.VCPU
		}
	}
	if len(opts.Allow) > 0 {
		spec.Network = &sandboxes.Network{Allow: opts.Allow}
	}
	c, err := opts.Conn.client()
	if err != nil {
		return err
	}
	var info sandboxes.Info
	if err := c.json(ctx, "POST", "/v1/sandboxes", nil, spec, &info); err != nil {
		return fmt.Errorf("create a sandbox: %w", err)
	}
	fmt.Fprintln(stdio.Out, info.ID)
	return nil
}

func newSandboxLsCmd(stdio Stdio) *cobra.Command {
	var conn connOptions
	var labels []string
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the server's sandboxes",
		Long:    `ls lists the server's sandboxes, those with every --label given, as a table.` + sandboxExitHelp,
		Example: `  agentsandbox sandbox ls
  agentsandbox sandbox ls --label project=demo`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSandboxLs(cmd.Context(), stdio, conn, labels)
		},
	}
	conn.AddFlags(cmd.Flags())
	cmd.Flags().StringArrayVar(&labels, "label", nil, "only sandboxes with the label K=V (repeatable)")
	return cmd
}

func runSandboxLs(ctx context.Context, stdio Stdio, conn connOptions, labels []string) error {
	if _, err := keyValues("label", labels); err != nil {
		return err
	}
	c, err := conn.client()
	if err != nil {
		return err
	}
	var list server.SandboxList
	if err := c.json(ctx, "GET", "/v1/sandboxes", url.Values{"label": labels}, nil, &list); err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	tw := tabwriter.NewWriter(stdio.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tISOLATION\tCREATED\tEXPIRES\tLABELS\tRECORD")
	for _, s := range list.Sandboxes {
		keys := make([]string, 0, len(s.Labels))
		for k := range s.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			keys[i] = k + "=" + s.Labels[k]
		}
		state := string(s.State)
		if s.Ended != "" {
			state += " (" + s.Ended + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, state, s.Isolation, s.Created.Local().Format(time.DateTime),
			s.ExpiresAt.Local().Format(time.DateTime), orDash(strings.Join(keys, ",")), orDash(s.Record))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newSandboxExecCmd(stdio Stdio) *cobra.Command {
	var opts sandboxExecOptions
	cmd := &cobra.Command{
		Use:   "exec ID -- COMMAND [ARG...]",
		Short: "Run a command in a sandbox, its output streamed live",
		Long: `exec runs COMMAND with its arguments in the sandbox (COMMAND is looked up in
the sandbox's PATH; for a shell line, run sh -c '...'), in the workspace or
--cwd, and streams its stdout and stderr here as they come. It exits with the
command's exit status. With -i its stdin is this command's stdin, read whole
before the command starts (text only). The command waits for this one to
write its output, so none is lost; output the server no longer has (it
should not happen in the foreground) is said on stderr where it would have
been, and the exit status is 5.` + sandboxExitHelp,
		Example: `  agentsandbox sandbox exec $ID -- ls -la
  agentsandbox sandbox exec $ID --cwd src --env DEBUG=1 --timeout 10m -- make test
  echo 'print(6*7)' | agentsandbox sandbox exec -i $ID -- python3 -`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return invalidf("sandbox exec: put -- between the sandbox id and the command: agentsandbox sandbox exec ID -- COMMAND [ARG...]")
			}
			return runSandboxExec(cmd.Context(), stdio, opts, args[0], args[1:])
		},
	}
	f := cmd.Flags()
	opts.Conn.AddFlags(f)
	f.StringVar(&opts.Cwd, "cwd", "", "directory to run in, relative to the workspace or absolute in the sandbox")
	f.StringArrayVar(&opts.Env, "env", nil, "an environment variable K=V (repeatable)")
	f.DurationVar(&opts.Timeout, "timeout", 0, "kill the command after this long (default: the sandbox's own timeout)")
	f.BoolVarP(&opts.Stdin, "interactive", "i", false, "send this command's stdin to the command (read whole first)")
	return cmd
}

func runSandboxExec(ctx context.Context, stdio Stdio, opts sandboxExecOptions, id string, argv []string) error {
	req := sandboxes.ExecRequest{Argv: argv, Cwd: opts.Cwd, Timeout: sandboxes.Duration(opts.Timeout)}
	var err error
	if req.Env, err = keyValues("env", opts.Env); err != nil {
		return err
	}
	if opts.Stdin {
		// The request, stdin in it, is JSON of at most 1 MiB.
		b, err := io.ReadAll(io.LimitReader(stdio.In, maxExecStdin+1))
		if err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
		if len(b) > maxExecStdin {
			return invalidf("-i: stdin is over %d KiB, more than one request carries; copy it in with sandbox cp and redirect from the file", maxExecStdin>>10)
		}
		if !utf8.Valid(b) {
			return invalidf("-i: stdin is not UTF-8 text; copy binary input in with sandbox cp and redirect from the file")
		}
		s := string(b)
		req.Stdin = &s
	}
	c, err := opts.Conn.client()
	if err != nil {
		return err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, "POST", sandboxPath(id, "exec"), nil, strings.NewReader(string(body)), "application/json")
	if err != nil {
		return fmt.Errorf("exec in %s: %w", id, err)
	}
	defer resp.Body.Close()
	// NDJSON: one event a line, written out as it comes. Each stream's
	// bytes are written in order and once; bytes the server did not send
	// (a gap) are said on stderr where they would have been, and fail the
	// command once it has ended.
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var next [2]int64
	var lost []string
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var ev sandboxes.ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("exec in %s: the server sent a line that is not an event: %w", id, err)
		}
		switch ev.Type {
		case sandboxes.EventStdout, sandboxes.EventStderr:
			i, w := 0, stdio.Out
			if ev.Type == sandboxes.EventStderr {
				i, w = 1, stdio.Err
			}
			data := []byte(ev.Text)
			if ev.Base64 != nil {
				data = ev.Base64
			}
			if ev.Offset > next[i] {
				lost = append(lost, execGap(stdio, ev.Type, next[i], ev.Offset))
			}
			if skip := next[i] - ev.Offset; skip > 0 { // sent before
				data = data[min(skip, int64(len(data))):]
			}
			w.Write(data)
			next[i] = max(next[i], ev.Offset+int64(len(ev.Text)+len(ev.Base64)))
		case sandboxes.EventGap:
			i := 0
			if ev.Stream == sandboxes.EventStderr {
				i = 1
			}
			if ev.Next > next[i] {
				lost = append(lost, execGap(stdio, ev.Stream, max(next[i], ev.Offset), ev.Next))
				next[i] = ev.Next
			}
		case sandboxes.EventError:
			return fmt.Errorf("exec in %s: %s", id, ev.Error)
		case sandboxes.EventExit:
			if len(lost) > 0 {
				if ev.Exit != nil {
					fmt.Fprintf(stdio.Err, "agentsandbox: the command's exit status was %d\n", ev.Exit.ExitCode)
				}
				return fmt.Errorf("exec in %s: output was lost: %s; the server keeps the first part of each stream (serve's log limit), the rest reaches only a reader that keeps up", id, strings.Join(lost, ", "))
			}
			return execExit(stdio, ev.Exit)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("exec in %s: the stream broke off: %w", id, err)
	}
	return fmt.Errorf("exec in %s: the stream ended without the command's exit; see agentsandbox sandbox ls", id)
}

// execGap says on stderr, where they would have been, that the bytes
// [from, to) of a stream were not sent, and returns the same as a phrase.
func execGap(stdio Stdio, stream string, from, to int64) string {
	what := fmt.Sprintf("%s bytes %d to %d (%d bytes)", stream, from, to, to-from)
	fmt.Fprintf(stdio.Err, "\nagentsandbox: %s were lost: the server no longer has them\n", what)
	return what
}

// execExit turns a command's exit into this command's: its exit status,
// or 128+n for signal n, as a shell does.
func execExit(stdio Stdio, st *sandboxes.ExitStatus) error {
	if st == nil {
		return errors.New("the server sent an exit without a status")
	}
	if st.TimedOut {
		fmt.Fprintf(stdio.Err, "agentsandbox: the command timed out after %v and was killed\n", time.Duration(st.DurationMS)*time.Millisecond)
	}
	code := st.ExitCode
	if st.Signal != "" {
		if n := unix.SignalNum(st.Signal); n != 0 {
			code = 128 + int(n)
		}
		if !st.TimedOut {
			fmt.Fprintf(stdio.Err, "agentsandbox: the command was killed by %s\n", st.Signal)
		}
	}
	if code == 0 && (st.Signal != "" || st.TimedOut) {
		code = ExitStepFailed
	}
	if code == 0 {
		return nil
	}
	if code < 0 || code > 255 {
		code = ExitStepFailed
	}
	return reported(&commandExit{code})
}

func newSandboxCpCmd(stdio Stdio) *cobra.Command {
	var conn connOptions
	var mode string
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file into a sandbox (LOCAL ID:PATH) or out of one (ID:PATH LOCAL)",
		Long: `cp copies one regular file between here and a sandbox's workspace. ID:PATH
names a file in the workspace of sandbox ID (PATH relative to the workspace);
the other side is a local path, or - for stdin or stdout. Copied in, the file
keeps its permission bits unless --mode is given, and missing parent
directories are made; copied out, its SHA-256 is checked against the server's,
and a LOCAL that is a directory receives the file under its own name. A local
path with a colon in it is written ./a:b.` + sandboxExitHelp,
		Example: `  agentsandbox sandbox cp main.py $ID:src/main.py
  agentsandbox sandbox cp $ID:out/report.txt .
  agentsandbox sandbox cp $ID:out/report.txt - | less`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSandboxCp(cmd.Context(), stdio, conn, mode, args[0], args[1])
		},
	}
	conn.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&mode, "mode", "", "permission bits of a file copied in, such as 0755")
	return cmd
}

// remoteArg splits ID:PATH; a local path (with a slash before any colon,
// or none) is not one.
func remoteArg(s string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(s, ":")
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", "", false
	}
	return id, p, true
}

func runSandboxCp(ctx context.Context, stdio Stdio, conn connOptions, mode, src, dst string) error {
	srcID, srcPath, srcRemote := remoteArg(src)
	dstID, dstPath, dstRemote := remoteArg(dst)
	if srcRemote == dstRemote {
		return invalidf("sandbox cp: give one side as ID:PATH and the other as a local path, such as: sandbox cp main.py %s:main.py", "ID")
	}
	if mode != "" {
		if _, err := strconv.ParseUint(mode, 8, 32); err != nil {
			return invalidf("--mode %q: want octal permission bits, such as 0644", mode)
		}
		if srcRemote {
			return invalidf("--mode applies to a file copied into a sandbox")
		}
	}
	c, err := conn.client()
	if err != nil {
		return err
	}
	if dstRemote {
		return cpIn(ctx, stdio, c, mode, src, dstID, dstPath)
	}
	return cpOut(ctx, stdio, c, srcID, srcPath, dst)
}

func cpIn(ctx context.Context, stdio Stdio, c *apiClient, mode, local, id, p string) error {
	var r io.Reader = stdio.In
	if local != "-" {
		f, err := os.Open(local)
		if err != nil {
			return invalidf("sandbox cp: %v", err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return invalidf("sandbox cp: %v", err)
		}
		if !fi.Mode().IsRegular() {
			return invalidf("sandbox cp: %s is not a regular file: cp copies one file (for a directory, tar it, copy the tarball and untar it with sandbox exec)", local)
		}
		if mode == "" {
			mode = fmt.Sprintf("%04o", fi.Mode().Perm())
		}
		r = f
		if p == "" || strings.HasSuffix(p, "/") {
			p += filepath.Base(local)
		}
	}
	if p == "" {
		return invalidf("sandbox cp: name the file in the sandbox: - %s:PATH", id)
	}
	var q url.Values
	if mode != "" {
		q = url.Values{"mode": {mode}}
	}
	resp, err := c.do(ctx, "PUT", sandboxPath(id, "files", escapePath(p)), q, r, "application/octet-stream")
	if err != nil {
		return fmt.Errorf("copy %s to %s:%s: %w", local, id, p, err)
	}
	return resp.Body.Close()
}

func cpOut(ctx context.Context, stdio Stdio, c *apiClient, id, p, local string) error {
	if p == "" {
		return invalidf("sandbox cp: name the file in the sandbox: %s:PATH", id)
	}
	resp, err := c.do(ctx, "GET", sandboxPath(id, "files", escapePath(p)), nil, nil, "")
	if err != nil {
		return fmt.Errorf("copy %s:%s: %w", id, p, err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	check := func() error {
		want := resp.Trailer.Get("X-Agentsandbox-Sha256")
		if got := hex.EncodeToString(h.Sum(nil)); want != "" && got != want {
			return fmt.Errorf("copy %s:%s: sha256 %s, but the server says %s: copy it again", id, p, got, want)
		}
		return nil
	}
	if local == "-" {
		if _, err := io.Copy(io.MultiWriter(stdio.Out, h), resp.Body); err != nil {
			return fmt.Errorf("copy %s:%s: %w", id, p, err)
		}
		return check()
	}
	if fi, err := os.Stat(local); err == nil && fi.IsDir() {
		local = filepath.Join(local, path.Base(p))
	}
	tmp, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".tmp-")
	if err != nil {
		return fmt.Errorf("copy %s:%s: %w", id, p, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(io.MultiWriter(tmp, h), resp.Body); err != nil {
		tmp.Close()
		return fmt.Errorf("copy %s:%s to %s: %w", id, p, local, err)
	}
	if err := check(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), local); err != nil {
		return fmt.Errorf("copy %s:%s: %w", id, p, err)
	}
	return nil
}

func newSandboxFilesCmd(stdio Stdio) *cobra.Command {
	var conn connOptions
	cmd := &cobra.Command{
		Use:   "files ID [DIR]",
		Short: "List a directory of a sandbox's workspace",
		Long:  `files lists DIR of the sandbox's workspace (the workspace itself by default), as ls -l does.` + sandboxExitHelp,
		Example: `  agentsandbox sandbox files $ID
  agentsandbox sandbox files $ID src`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := ""
			if len(args) == 2 {
				dir = args[1]
			}
			return runSandboxFiles(cmd.Context(), stdio, conn, args[0], dir)
		},
	}
	conn.AddFlags(cmd.Flags())
	return cmd
}

func runSandboxFiles(ctx context.Context, stdio Stdio, conn connOptions, id, dir string) error {
	c, err := conn.client()
	if err != nil {
		return err
	}
	p := sandboxPath(id, "ls")
	if dir = strings.Trim(dir, "/"); dir != "" && dir != "." {
		p += "/" + escapePath(dir)
	}
	var list server.FileList
	if err := c.json(ctx, "GET", p, nil, nil, &list); err != nil {
		return fmt.Errorf("list %s:%s: %w", id, dir, err)
	}
	tw := tabwriter.NewWriter(stdio.Out, 0, 4, 1, ' ', tabwriter.AlignRight)
	for _, f := range list.Files {
		name := path.Base(f.Path)
		if f.Type == "dir" {
			name += "/"
		}
		fmt.Fprintf(tw, "%s\t%d\t %s\t %s\n", fileMode(f), f.Size, f.ModTime.Local().Format("Jan _2 15:04"), name)
	}
	return tw.Flush()
}

// fileMode is f's type and permission bits as ls -l shows them.
func fileMode(f sandboxes.FileInfo) string {
	perm, _ := strconv.ParseUint(f.Mode, 8, 32)
	m := fs.FileMode(perm) & fs.ModePerm
	switch f.Type {
	case "dir":
		m |= fs.ModeDir
	case "symlink":
		m |= fs.ModeSymlink
	case "other":
		m |= fs.ModeIrregular
	}
	return m.String()
}

func newSandboxRmCmd(stdio Stdio) *cobra.Command {
	var conn connOptions
	cmd := &cobra.Command{
		Use:     "rm ID...",
		Aliases: []string{"kill"},
		Short:   "Kill sandboxes and print their record ids",
		Long: `rm kills each sandbox, which stops its commands and closes its execution
record, and prints the record's id (see records show and records verify). It
goes on past a sandbox it cannot kill and fails at the end.` + sandboxExitHelp,
		Example: `  agentsandbox sandbox rm $ID
  agentsandbox records show $(agentsandbox sandbox rm $ID)`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSandboxRm(cmd.Context(), stdio, conn, args)
		},
	}
	conn.AddFlags(cmd.Flags())
	return cmd
}

func runSandboxRm(ctx context.Context, stdio Stdio, conn connOptions, ids []string) error {
	c, err := conn.client()
	if err != nil {
		return err
	}
	var first error
	for _, id := range ids {
		var info sandboxes.Info
		if err := c.json(ctx, "DELETE", sandboxPath(id), nil, nil, &info); err != nil {
			err = fmt.Errorf("kill %s: %w", id, err)
			if first == nil {
				first = err
			} else {
				fmt.Fprintf(stdio.Err, "agentsandbox: %v\n", err)
			}
			continue
		}
		fmt.Fprintln(stdio.Out, info.Record)
	}
	return first
}
