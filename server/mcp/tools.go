package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

type tools struct {
	m sandboxes.Manager
	o Options
}

func (t *tools) register(s *sdk.Server) {
	addTool(s, &sdk.Tool{Name: "sandbox_create", Title: "Create a sandbox",
		Description: "Create a long-lived sandbox to run commands in: an isolated Linux system with an empty workspace (the working directory), no network unless network_allow lists hosts, and quotas. Every argument is optional. Returns the sandbox's id, which the other tools take as sandbox_id; the sandbox ends after ttl, after idle_timeout without use, or at kill."},
		t.create)
	addTool(s, &sdk.Tool{Name: "exec", Title: "Run a command in a sandbox",
		Description: "Run one command in a sandbox and wait for it to end. Give either argv (a program and its arguments, run without a shell) or shell (a /bin/sh -c script, for pipes and redirections). Files and installed state persist between commands. A non-zero exit_code is a normal result, not an error: read stderr. Output longer than the limit is cut; the result then says so and exec_output reads the rest by exec_id.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)}},
		t.exec)
	addTool(s, &sdk.Tool{Name: "exec_output", Title: "Read more of a command's output",
		Description: "Read a command's output from byte offsets, for output exec cut short: pass the exec_id and the offsets exec reported (stdout_next, stderr_next), then the next offsets this returns until more is false. The server keeps the first 256 MiB of each stream; bytes it no longer has are counted in stdout_lost and stderr_lost, never skipped silently.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)}},
		t.execOutput)
	addTool(s, &sdk.Tool{Name: "read_file", Title: "Read a file of a sandbox",
		Description: "Read a file of the sandbox's workspace. The path is relative to the workspace; \"..\" and symlinks leading out are refused. Text by default; set base64 for a binary file.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)}},
		t.readFile)
	addTool(s, &sdk.Tool{Name: "write_file", Title: "Write a file in a sandbox",
		Description: "Create or replace a file in the sandbox's workspace, creating its parent directories. The path is relative to the workspace. content is text, or base64 of the bytes when base64 is set.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)}},
		t.writeFile)
	addTool(s, &sdk.Tool{Name: "list_files", Title: "List a directory of a sandbox",
		Description: "List a directory of the sandbox's workspace (the workspace itself when path is empty): each entry's path, type, size, permissions and modification time.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)}},
		t.listFiles)
	addTool(s, &sdk.Tool{Name: "kill", Title: "Kill a sandbox",
		Description: "Stop a sandbox and every command in it, and close its execution record. Returns the record's id (read it as the resource agentsandbox://records/{id}, or with `agentsandbox records show`). The sandbox's files are gone afterwards.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)}},
		t.kill)
	addTool(s, &sdk.Tool{Name: "list_sandboxes", Title: "List sandboxes",
		Description: "List your sandboxes (running, and stopped ones the server still remembers; an admin sees every identity's), optionally only those carrying every given label.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)}},
		t.list)
	t.registerSnapshots(s)
	t.registerRuns(s)
	t.registerNetwork(s)
}

// CreateArgs are sandbox_create's arguments.
type CreateArgs struct {
	Template     string            `json:"template,omitempty" jsonschema:"a workflow step to start from, as FILE#STEP with FILE relative to the server's template directory; the other arguments override the step's fields"`
	Isolation    string            `json:"isolation,omitempty" jsonschema:"namespace (the default: a namespace jail), vm (a microVM) or auto (vm where KVM is usable)"`
	Packages     []string          `json:"packages,omitempty" jsonschema:"Nix packages to put on PATH, such as python3 or git (needs Nix on the server)"`
	Resources    map[string]any    `json:"resources,omitempty" jsonschema:"quotas as in a workflow step, such as {\"memory\": \"1GiB\", \"vcpu\": 2, \"timeout\": \"10m\"}; timeout is each command's default limit"`
	NetworkAllow []string          `json:"network_allow,omitempty" jsonschema:"hosts, *.domains and CIDR:port the sandbox may reach, subject to the server's policy; without it the sandbox has no network"`
	Env          map[string]string `json:"env,omitempty" jsonschema:"environment variables of every command in the sandbox"`
	TTL          string            `json:"ttl,omitempty" jsonschema:"how long the sandbox lives, a duration such as 30m (default 1h)"`
	IdleTimeout  string            `json:"idle_timeout,omitempty" jsonschema:"how long the sandbox lives without a command or file action, a duration such as 5m (default 15m)"`
	Labels       map[string]string `json:"labels,omitempty" jsonschema:"labels to find the sandbox by with list_sandboxes, such as {\"task\": \"build\"}"`
	FromSnapshot string            `json:"from_snapshot,omitempty" jsonschema:"a snapshot's id: the workspace starts with its files (a fork)"`
}

// Sandbox is a sandbox as the tools show it.
type Sandbox struct {
	ID          string            `json:"id"`
	State       string            `json:"state" jsonschema:"running or stopped"`
	Isolation   string            `json:"isolation"`
	Labels      map[string]string `json:"labels,omitempty"`
	Created     string            `json:"created"`
	ExpiresAt   string            `json:"expires_at"`
	IdleTimeout string            `json:"idle_timeout"`
	LastActive  string            `json:"last_active"`
	Usage       sandboxes.Usage   `json:"usage"`
	Record      string            `json:"record,omitempty" jsonschema:"the execution record's id, once the sandbox stopped"`
	Ended       string            `json:"ended,omitempty" jsonschema:"why a stopped sandbox stopped"`
	Owner       string            `json:"owner,omitempty" jsonschema:"the identity the sandbox belongs to"`
}

func sandboxOf(i sandboxes.Info) Sandbox {
	return Sandbox{ID: i.ID, State: string(i.State), Isolation: i.Isolation, Labels: i.Labels,
		Created: rfc3339(i.Created), ExpiresAt: rfc3339(i.ExpiresAt), IdleTimeout: i.IdleTimeout.D().String(),
		LastActive: rfc3339(i.LastActive), Usage: i.Usage, Record: i.Record, Ended: i.Ended, Owner: i.Owner}
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func (t *tools) create(ctx context.Context, a CreateArgs) (Sandbox, string, error) {
	ttl, err := parseDuration("ttl", a.TTL)
	if err != nil {
		return Sandbox{}, "", err
	}
	idle, err := parseDuration("idle_timeout", a.IdleTimeout)
	if err != nil {
		return Sandbox{}, "", err
	}
	spec := sandboxes.Spec{Template: a.Template, Isolation: a.Isolation, Packages: a.Packages, Resources: a.Resources,
		Env: a.Env, TTL: sandboxes.Duration(ttl), IdleTimeout: sandboxes.Duration(idle), Labels: a.Labels,
		FromSnapshot: a.FromSnapshot}
	if a.NetworkAllow != nil {
		spec.Network = &sandboxes.Network{Allow: a.NetworkAllow}
	}
	info, err := t.m.Create(ctx, spec)
	if err != nil {
		return Sandbox{}, "", err
	}
	return sandboxOf(info), "", nil
}

// ExecArgs are exec's arguments.
type ExecArgs struct {
	SandboxID string            `json:"sandbox_id" jsonschema:"the sandbox's id, from sandbox_create or list_sandboxes"`
	Argv      []string          `json:"argv,omitempty" jsonschema:"the program and its arguments, such as [\"ls\", \"-l\"]; the program is looked up in PATH. Give argv or shell, not both"`
	Shell     string            `json:"shell,omitempty" jsonschema:"a script for /bin/sh -c, such as \"make 2>&1 | tail -n 20\". Give argv or shell, not both"`
	Cwd       string            `json:"cwd,omitempty" jsonschema:"the working directory, relative to the workspace or absolute in the sandbox (default: the workspace)"`
	Env       map[string]string `json:"env,omitempty" jsonschema:"environment variables for this command, over the sandbox's"`
	Timeout   string            `json:"timeout,omitempty" jsonschema:"kill the command after this long, a duration such as 2m (default: the sandbox's command timeout)"`
	Stdin     *string           `json:"stdin,omitempty" jsonschema:"text given to the command on its standard input (default: none, it reads an empty input)"`
}

// ExecResult is exec's result.
type ExecResult struct {
	ExecID     string `json:"exec_id" jsonschema:"the command's id, for exec_output"`
	ExitCode   int    `json:"exit_code" jsonschema:"the exit status; 128+N when killed by signal N"`
	Signal     string `json:"signal,omitempty" jsonschema:"the signal that killed the command, such as SIGKILL"`
	TimedOut   bool   `json:"timed_out" jsonschema:"true when the timeout killed the command"`
	DurationMS int64  `json:"duration_ms"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	// Truncated says stdout or stderr was cut at the limit; *Next are the
	// offsets to read on from with exec_output.
	Truncated   bool   `json:"truncated" jsonschema:"true when stdout or stderr was cut; read the rest with exec_output from stdout_next and stderr_next"`
	StdoutBytes int64  `json:"stdout_bytes" jsonschema:"all of stdout's bytes, shown or not"`
	StderrBytes int64  `json:"stderr_bytes" jsonschema:"all of stderr's bytes, shown or not"`
	StdoutNext  int64  `json:"stdout_next" jsonschema:"the stdout offset after what is shown"`
	StderrNext  int64  `json:"stderr_next" jsonschema:"the stderr offset after what is shown"`
	StdoutLost  int64  `json:"stdout_lost,omitempty" jsonschema:"bytes of stdout before what is shown that the server no longer has (it keeps the first 256 MiB)"`
	StderrLost  int64  `json:"stderr_lost,omitempty" jsonschema:"bytes of stderr before what is shown that the server no longer has"`
	Error       string `json:"error,omitempty" jsonschema:"why the command could not start (then there is no exit status)"`
}

// stream collects one output stream from an offset, up to a limit: the
// bytes shown are contiguous. A gap (bytes the server no longer has) at
// the start is counted in lost; one after bytes ends what is shown, and
// the next read from next starts with it.
type stream struct {
	buf   bytes.Buffer
	total int64 // bytes seen, from offset 0
	next  int64 // offset after buf
	lost  int64 // bytes of a gap before buf
	limit int
	full  bool // no more is shown
}

func (s *stream) add(off int64, b []byte) {
	if end := off + int64(len(b)); end > s.total {
		s.total = end
	}
	if s.full || off+int64(len(b)) <= s.next {
		return
	}
	if off < s.next { // the part already shown (a repeat)
		b, off = b[s.next-off:], s.next
	}
	if off > s.next { // a jump: no gap event said so; say it anyway
		s.gap(s.next, off)
		if s.full {
			return
		}
	}
	n := min(len(b), s.limit-s.buf.Len())
	if n < len(b) {
		// Cut between characters, so the text shown stays text and the
		// next read starts at a character.
		for k := n; k > n-utf8.UTFMax && k > 0; k-- {
			if utf8.RuneStart(b[k]) {
				n = k
				break
			}
		}
		s.full = true
	}
	s.buf.Write(b[:n])
	s.next += int64(n)
}

// gap takes the bytes [off, to) the server no longer has.
func (s *stream) gap(off, to int64) {
	if to > s.total {
		s.total = to
	}
	if s.full || to <= s.next || off > s.next {
		return
	}
	if s.buf.Len() > 0 {
		s.full = true // shown up to the gap; a read from next reports it
		return
	}
	s.lost += to - s.next
	s.next = to
}

func (s *stream) cut() bool { return s.next < s.total }

// text is the collected bytes as text; bytes that are not UTF-8 (a binary
// output) become U+FFFD.
func (s *stream) text() string {
	b := s.buf.Bytes()
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// errFull stops a read of output once what is shown is full.
var errFull = errors.New("shown in full")

func collect(out, errs *stream) func(sandboxes.ExecEvent) error {
	return func(ev sandboxes.ExecEvent) error {
		data := []byte(ev.Text)
		if ev.Base64 != nil {
			data = ev.Base64
		}
		switch ev.Type {
		case sandboxes.EventStdout:
			out.add(ev.Offset, data)
		case sandboxes.EventStderr:
			errs.add(ev.Offset, data)
		case sandboxes.EventGap:
			if ev.Stream == sandboxes.EventStderr {
				errs.gap(ev.Offset, ev.Next)
			} else {
				out.gap(ev.Offset, ev.Next)
			}
		}
		return nil
	}
}

func (t *tools) exec(ctx context.Context, a ExecArgs) (ExecResult, string, error) {
	timeout, err := parseDuration("timeout", a.Timeout)
	if err != nil {
		return ExecResult{}, "", err
	}
	out := &stream{limit: t.o.MaxOutputBytes}
	errs := &stream{limit: t.o.MaxOutputBytes}
	var startErr string
	emit := collect(out, errs)
	info, err := t.m.Exec(ctx, a.SandboxID, sandboxes.ExecRequest{Argv: a.Argv, Shell: a.Shell, Cwd: a.Cwd, Env: a.Env,
		Timeout: sandboxes.Duration(timeout), Stdin: a.Stdin}, func(ev sandboxes.ExecEvent) error {
		if ev.Type == sandboxes.EventError {
			startErr = ev.Error
		}
		return emit(ev)
	})
	if err != nil {
		return ExecResult{}, "", err
	}
	r := ExecResult{ExecID: info.ID, Stdout: out.text(), Stderr: errs.text(), Error: startErr,
		Truncated: out.cut() || errs.cut(), StdoutNext: out.next, StderrNext: errs.next,
		StdoutBytes: max(out.total, info.StdoutBytes), StderrBytes: max(errs.total, info.StderrBytes),
		StdoutLost: out.lost, StderrLost: errs.lost}
	if x := info.Exit; x != nil {
		r.ExitCode, r.Signal, r.TimedOut, r.DurationMS = x.ExitCode, x.Signal, x.TimedOut, x.DurationMS
	}
	if r.StdoutNext < r.StdoutBytes || r.StderrNext < r.StderrBytes {
		r.Truncated = true
	}
	return r, execText(r), nil
}

// execText is exec's result for a reader of text: what happened in one
// line, a note when output was cut, then the output.
func execText(r ExecResult) string {
	var b strings.Builder
	switch {
	case r.Error != "":
		fmt.Fprintf(&b, "the command did not start: %s", r.Error)
	case r.TimedOut:
		fmt.Fprintf(&b, "timed out after %dms and was killed (exit code %d)", r.DurationMS, r.ExitCode)
	case r.Signal != "":
		fmt.Fprintf(&b, "killed by %s (exit code %d) after %dms", r.Signal, r.ExitCode, r.DurationMS)
	default:
		fmt.Fprintf(&b, "exit code %d after %dms", r.ExitCode, r.DurationMS)
	}
	fmt.Fprintf(&b, " (exec %s)\n", r.ExecID)
	if r.StdoutLost+r.StderrLost > 0 {
		fmt.Fprintf(&b, "output lost: %d bytes of stdout and %d of stderr are no longer on the server and are not shown\n", r.StdoutLost, r.StderrLost)
	}
	if r.Truncated {
		fmt.Fprintf(&b, "output cut: stdout shows %d of %d bytes, stderr %d of %d; call exec_output with exec_id %q, stdout_offset %d and stderr_offset %d for more\n",
			r.StdoutNext, r.StdoutBytes, r.StderrNext, r.StderrBytes, r.ExecID, r.StdoutNext, r.StderrNext)
	}
	if r.Stdout != "" {
		b.WriteString("stdout:\n" + r.Stdout)
		if !strings.HasSuffix(r.Stdout, "\n") {
			b.WriteByte('\n')
		}
	}
	if r.Stderr != "" {
		b.WriteString("stderr:\n" + r.Stderr)
	}
	return b.String()
}

// ExecOutputArgs are exec_output's arguments.
type ExecOutputArgs struct {
	SandboxID    string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	ExecID       string `json:"exec_id" jsonschema:"the command's id, from exec's result"`
	StdoutOffset int64  `json:"stdout_offset,omitempty" jsonschema:"the stdout byte offset to read from (exec's stdout_next)"`
	StderrOffset int64  `json:"stderr_offset,omitempty" jsonschema:"the stderr byte offset to read from (exec's stderr_next)"`
}

// ExecOutputResult is exec_output's result.
type ExecOutputResult struct {
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	StdoutFrom int64  `json:"stdout_from" jsonschema:"where stdout starts: later than asked when bytes were lost (stdout_lost)"`
	StderrFrom int64  `json:"stderr_from"`
	StdoutNext int64  `json:"stdout_next" jsonschema:"the offset to read on from"`
	StderrNext int64  `json:"stderr_next"`
	StdoutLost int64  `json:"stdout_lost,omitempty" jsonschema:"bytes of stdout from stdout_offset that the server no longer has (it keeps the first 256 MiB of each stream): they are not shown"`
	StderrLost int64  `json:"stderr_lost,omitempty" jsonschema:"the same for stderr"`
	More       bool   `json:"more" jsonschema:"true when there is more output after stdout_next or stderr_next"`
	Running    bool   `json:"running"`
}

func (t *tools) execOutput(ctx context.Context, a ExecOutputArgs) (ExecOutputResult, string, error) {
	out := &stream{limit: t.o.MaxOutputBytes, next: a.StdoutOffset}
	errs := &stream{limit: t.o.MaxOutputBytes, next: a.StderrOffset}
	// One stream at a time (the other from past its end), each read only
	// as far as it is shown.
	for _, r := range []struct {
		s                *stream
		outFrom, errFrom int64
	}{{out, a.StdoutOffset, math.MaxInt64}, {errs, math.MaxInt64, a.StderrOffset}} {
		emit := collect(out, errs)
		err := t.m.Output(ctx, a.SandboxID, a.ExecID, r.outFrom, r.errFrom, false, func(ev sandboxes.ExecEvent) error {
			if err := emit(ev); err != nil {
				return err
			}
			if r.s.full {
				return errFull
			}
			return nil
		})
		if err != nil && !errors.Is(err, errFull) {
			return ExecOutputResult{}, "", err
		}
	}
	info, err := t.m.GetExec(ctx, a.SandboxID, a.ExecID)
	if err != nil {
		return ExecOutputResult{}, "", err
	}
	r := ExecOutputResult{Stdout: out.text(), Stderr: errs.text(),
		StdoutFrom: out.next - int64(out.buf.Len()), StderrFrom: errs.next - int64(errs.buf.Len()),
		StdoutNext: out.next, StderrNext: errs.next, StdoutLost: out.lost, StderrLost: errs.lost, Running: info.Running}
	r.More = r.StdoutNext < info.StdoutBytes || r.StderrNext < info.StderrBytes
	return r, "", nil
}

// ReadFileArgs are read_file's arguments.
type ReadFileArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path" jsonschema:"the file's path relative to the workspace, such as src/main.go"`
	Base64    bool   `json:"base64,omitempty" jsonschema:"return the bytes as base64 (for a file that is not text)"`
}

// FileContent is read_file's result.
type FileContent struct {
	Path     string `json:"path"`
	Size     int64  `json:"size"`
	Encoding string `json:"encoding" jsonschema:"text or base64"`
	Content  string `json:"content"`
}

// limitWriter fails once more than n bytes are written.
type limitWriter struct {
	buf bytes.Buffer
	n   int
}

func (w *limitWriter) Write(p []byte) (int, error) {
	if w.buf.Len()+len(p) > w.n {
		return 0, sandboxes.Errorf(sandboxes.CodeTooLarge, "the file is larger than the %d bytes read_file returns: read parts of it with exec (head -c, tail -c, sed -n)", w.n)
	}
	return w.buf.Write(p)
}

func (t *tools) readFile(ctx context.Context, a ReadFileArgs) (FileContent, string, error) {
	if a.Path == "" {
		return FileContent{}, "", sandboxes.Errorf(sandboxes.CodeBadRequest, "read_file: path is empty; give a file's path relative to the workspace")
	}
	st, err := t.m.Stat(ctx, a.SandboxID, a.Path)
	if err != nil {
		return FileContent{}, "", err
	}
	limit := t.o.MaxOutputBytes
	if st.Type == "file" && st.Size > int64(limit) {
		return FileContent{}, "", sandboxes.Errorf(sandboxes.CodeTooLarge, "read_file %q: the file is %d bytes, more than the %d read_file returns: read parts of it with exec (head -c, tail -c, sed -n)", a.Path, st.Size, limit)
	}
	w := &limitWriter{n: limit}
	fi, err := t.m.GetFile(ctx, a.SandboxID, a.Path, w)
	if err != nil {
		return FileContent{}, "", err
	}
	r := FileContent{Path: fi.Path, Size: fi.Size, Encoding: "text"}
	if a.Base64 {
		r.Encoding, r.Content = "base64", base64.StdEncoding.EncodeToString(w.buf.Bytes())
		return r, "", nil
	}
	if !utf8.Valid(w.buf.Bytes()) {
		return FileContent{}, "", sandboxes.Errorf(sandboxes.CodeBadRequest, "read_file %q: the file is not UTF-8 text: read it with base64 set", a.Path)
	}
	r.Content = w.buf.String()
	return r, "", nil
}

// WriteFileArgs are write_file's arguments.
type WriteFileArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path" jsonschema:"the file's path relative to the workspace; missing parent directories are created"`
	Content   string `json:"content" jsonschema:"the file's whole content: text, or base64 when base64 is set"`
	Base64    bool   `json:"base64,omitempty" jsonschema:"content is base64 of the bytes (for a file that is not text)"`
	Mode      string `json:"mode,omitempty" jsonschema:"octal permissions, such as 0755 for a script (default 0644)"`
}

// File is a file or directory of a workspace.
type File struct {
	Path    string `json:"path" jsonschema:"relative to the workspace"`
	Type    string `json:"type" jsonschema:"file, dir, symlink or other"`
	Size    int64  `json:"size"`
	Mode    string `json:"mode" jsonschema:"octal permissions"`
	ModTime string `json:"mod_time"`
	SHA256  string `json:"sha256,omitempty" jsonschema:"of a file just written"`
}

func fileOf(fi sandboxes.FileInfo) File {
	return File{Path: fi.Path, Type: fi.Type, Size: fi.Size, Mode: fi.Mode, ModTime: rfc3339(fi.ModTime), SHA256: fi.SHA256}
}

func (t *tools) writeFile(ctx context.Context, a WriteFileArgs) (File, string, error) {
	if a.Path == "" {
		return File{}, "", sandboxes.Errorf(sandboxes.CodeBadRequest, "write_file: path is empty; give the file's path relative to the workspace")
	}
	data := []byte(a.Content)
	if a.Base64 {
		b, err := base64.StdEncoding.DecodeString(a.Content)
		if err != nil {
			return File{}, "", sandboxes.Errorf(sandboxes.CodeBadRequest, "write_file %q: content is not valid base64 (%v): encode the bytes with standard base64, or unset base64 to write text", a.Path, err)
		}
		data = b
	}
	mode := uint64(0o644)
	if a.Mode != "" {
		m, err := strconv.ParseUint(a.Mode, 8, 32)
		if err != nil || m > 0o7777 {
			return File{}, "", sandboxes.Errorf(sandboxes.CodeBadRequest, "write_file %q: mode %q: want octal permissions such as 0644 or 0755", a.Path, a.Mode)
		}
		mode = m
	}
	fi, err := t.m.PutFile(ctx, a.SandboxID, a.Path, bytes.NewReader(data), uint32(mode))
	if err != nil {
		return File{}, "", err
	}
	return fileOf(fi), "", nil
}

// ListFilesArgs are list_files' arguments.
type ListFilesArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path,omitempty" jsonschema:"the directory relative to the workspace (default: the workspace)"`
}

// FileList is list_files' result.
type FileList struct {
	Files []File `json:"files"`
}

func (t *tools) listFiles(ctx context.Context, a ListFilesArgs) (FileList, string, error) {
	list, err := t.m.ListFiles(ctx, a.SandboxID, a.Path)
	if err != nil {
		return FileList{}, "", err
	}
	r := FileList{Files: make([]File, 0, len(list))}
	for _, fi := range list {
		r.Files = append(r.Files, fileOf(fi))
	}
	return r, "", nil
}

// KillArgs are kill's arguments.
type KillArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
}

func (t *tools) kill(ctx context.Context, a KillArgs) (Sandbox, string, error) {
	info, err := t.m.Kill(ctx, a.SandboxID)
	if err != nil {
		return Sandbox{}, "", err
	}
	return sandboxOf(info), "", nil
}

// ListArgs are list_sandboxes' arguments.
type ListArgs struct {
	Labels map[string]string `json:"labels,omitempty" jsonschema:"only sandboxes carrying all these labels"`
}

// SandboxList is list_sandboxes' result.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

func (t *tools) list(ctx context.Context, a ListArgs) (SandboxList, string, error) {
	list, err := t.m.List(ctx, a.Labels)
	if err != nil {
		return SandboxList{}, "", err
	}
	r := SandboxList{Sandboxes: make([]Sandbox, 0, len(list))}
	for _, i := range list {
		r.Sandboxes = append(r.Sandboxes, sandboxOf(i))
	}
	return r, "", nil
}
