// Package nixbuild realises Nix flakes: it runs `nix build --json --no-link`
// on a generated flake, parses what Nix built, lists the closure with
// `nix path-info --json --recursive` (store paths with NAR hashes and
// sizes, the pinned closure a record keeps), and keeps the flake's lock
// file next to the workflow as <workflow>.lock so that every input stays
// pinned from one run to the next.
//
// Command lines are data: buildArgs and pathInfoArgs return the argv that
// Build and Closure run, so --dry-run can print them and tests compare them.
// It works with Nix 2.18 and later, which today's nixpkgs needs (the
// experimental features are enabled on the command line, and path-info's
// JSON is read in both the list shape of Nix before 2.19 and the object
// shape after); Version and CheckVersion tell an older one apart.
package nixbuild

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentsandbox/agentsandbox/fsx/atomicfile"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/nix-community/go-nix/pkg/nixhash"
)

// ExperimentalFeatures are the features every nix invocation enables.
const ExperimentalFeatures = "nix-command flakes"

// ErrNixMissing says that the nix command is not installed.
var ErrNixMissing = errors.New("nix not found in PATH: install Nix " + MinNixVersionHint + " (" + HowToGetNix + "), " +
	"or use isolation: namespace, which needs no Nix for steps without packages")

// MinNixVersionHint is the Nix to install, for messages.
const MinNixVersionHint = "2.18 or later"

// ErrBuildUsers says that Nix is configured to build as the members of a
// build-users group that does not exist, which Debian's nix-bin leaves so:
// the package installs Nix but not its build users.
var ErrBuildUsers = errors.New("nix cannot build: its build-users group does not exist. " +
	"Create Nix's build users (the group nixbld and users nixbld1-10: scripts/install-nix.sh adds them " +
	"as Debian's nix-setup-systemd does, without needing systemd as PID 1), or build as root without them by setting " +
	"'build-users-group =' in /etc/nix/nix.conf")

// buildUsersMissing matches Nix's message for a missing build-users group,
// as Nix 2.8 to 2.2x print it.
var buildUsersMissing = regexp.MustCompile(`the group '([^']*)' specified in 'build-users-group' does not exist`)

// stderrTail is how much of nix's stderr a failure shows.
const stderrTail = 4000

// Options control a build.
type Options struct {
	// Offline passes --offline: no substituters, no fetching; inputs must
	// already be in the store.
	Offline bool
	// UpdateLock refreshes the lock on purpose (--recreate-lock-file).
	UpdateLock bool
	// LockFile is the workflow's lock, <workflow>.lock. Build copies it
	// into the flake as flake.lock before building and copies Nix's
	// flake.lock back after a successful build if it changed. Empty: the
	// flake directory's own flake.lock, if any, is used as is.
	LockFile string
	// Locked says a lock file is in place in the flake directory; Build
	// sets it. Then buildArgs passes --no-update-lock-file (unless
	// UpdateLock), so Nix fails rather than silently changing the pins.
	Locked bool
	// Steps maps attributes to the workflow steps they belong to; errors
	// name the step.
	Steps map[string]string
	// Share is how builds are shared with other machines: substituters
	// and their keys, remote builders, max-jobs (share.go). Its Push is
	// Push's, after the build.
	Share Sharing
	// Store is the Nix store to build in (--store), "" for Nix's default
	// one; tests build in stores of their own.
	Store string
	// Nix is the nix binary; empty means "nix" from PATH.
	Nix string
	// Stderr, when set, receives nix's stderr (progress, build logs) live.
	Stderr io.Writer
}

// Output is one built attribute.
type Output struct {
	Attr    string            `json:"attr"`
	DrvPath string            `json:"drvPath"`
	Out     string            `json:"out"`     // the "out" output
	Outputs map[string]string `json:"outputs"` // every output by name
}

// PathInfo is one store path of a closure.
type PathInfo struct {
	Path string `json:"path"`
	// NarHash is the sha256 of the path's NAR serialisation, always as
	// "sha256:" followed by Nix's base32 (52 characters), the form of
	// `nix hash path --type sha256 --base32` and of .narinfo files,
	// whatever form this Nix printed.
	NarHash    string   `json:"narHash"`
	NarSize    int64    `json:"narSize"`
	References []string `json:"references"`
}

// buildArgs is the argv of `nix build` for attrs of the flake in flakeDir
// (an absolute path). argv[0] is "nix"; Build replaces it with the binary.
func buildArgs(flakeDir string, attrs []string, o Options) []string {
	args := []string{"nix", "--extra-experimental-features", ExperimentalFeatures,
		"build", "--json", "--no-link"}
	args = append(args, storeArgs(o.Store)...)
	args = append(args, o.Share.args()...)
	if o.Offline {
		args = append(args, "--offline")
	}
	switch {
	case o.UpdateLock:
		args = append(args, "--recreate-lock-file")
	case o.Locked:
		args = append(args, "--no-update-lock-file")
	}
	for _, a := range attrs {
		args = append(args, "path:"+flakeDir+"#"+a)
	}
	return args
}

// pathInfoArgs is the argv of `nix path-info` listing the closure of
// paths in store ("" for Nix's default).
func pathInfoArgs(store string, paths []string) []string {
	args := []string{"nix", "--extra-experimental-features", ExperimentalFeatures,
		"path-info", "--json", "--recursive"}
	args = append(args, storeArgs(store)...)
	return append(args, paths...)
}

// LookNix finds the nix binary: o.Nix, or nix in PATH. The error wraps
// ErrNixMissing.
func LookNix(nix string) (string, error) {
	if nix == "" {
		nix = "nix"
	}
	p, err := exec.LookPath(nix)
	if err != nil {
		return "", fmt.Errorf("%w (%v)", ErrNixMissing, err)
	}
	return p, nil
}

// Build builds attrs of the flake in flakeDir and returns one Output per
// attribute, in the order of attrs. See Options for how the lock is kept.
func Build(ctx context.Context, flakeDir string, attrs []string, o Options) ([]Output, error) {
	if len(attrs) == 0 {
		return nil, errors.New("nix build: no attributes to build")
	}
	if err := o.Share.Check(); err != nil {
		return nil, fmt.Errorf("nix build: %w", err)
	}
	if o.Offline && o.Share.Substitutes() {
		return nil, errors.New("nix build: offline, yet substituters or remote builders are given: an offline build fetches nothing; drop one")
	}
	nix, err := LookNix(o.Nix)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(flakeDir)
	if err != nil {
		return nil, fmt.Errorf("nix build: %w", err)
	}
	flakeLock := filepath.Join(dir, "flake.lock")
	var pinned []byte // the workflow's lock as it was before the build
	if o.LockFile != "" {
		pinned, err = os.ReadFile(o.LockFile)
		switch {
		case err == nil:
			if cur, err := os.ReadFile(flakeLock); err == nil && bytes.Equal(cur, pinned) {
				break // already in place; a rewrite would only cost an fsync
			}
			if err := atomicfile.WriteFile(flakeLock, pinned, 0o644); err != nil {
				return nil, fmt.Errorf("pin flake inputs from %s: %w", o.LockFile, err)
			}
		case errors.Is(err, os.ErrNotExist):
			// No pins yet: Nix locks the inputs and we keep what it wrote.
			pinned = nil
			if err := os.Remove(flakeLock); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("remove stale %s: %w", flakeLock, err)
			}
		default:
			return nil, fmt.Errorf("read lock file: %w", err)
		}
	}
	_, statErr := os.Stat(flakeLock)
	o.Locked = statErr == nil

	argv := buildArgs(dir, attrs, o)
	stdout, err := run(ctx, nix, argv, o.Stderr)
	if err != nil {
		return nil, buildError(attrs, o, err)
	}
	outs, err := parseBuildJSON(stdout, attrs)
	if err != nil {
		return nil, fmt.Errorf("nix build %s: %w", strings.Join(attrs, " "), err)
	}

	if o.LockFile != "" {
		got, err := os.ReadFile(flakeLock)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("read the lock Nix wrote: %w", err)
		}
		// A flake without inputs may have no lock at all; nothing to keep.
		if err == nil && !bytes.Equal(got, pinned) {
			if err := atomicfile.WriteFile(o.LockFile, got, 0o644); err != nil {
				return nil, fmt.Errorf("keep the flake lock next to the workflow: %w", err)
			}
		}
	}
	return outs, nil
}

// Closure lists every store path in the closure of paths, sorted by path.
func Closure(ctx context.Context, paths []string) ([]PathInfo, error) {
	return ClosureIn(ctx, "", paths)
}

// ClosureIn is Closure in the Nix store store ("" for Nix's default).
func ClosureIn(ctx context.Context, store string, paths []string) ([]PathInfo, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	nix, err := LookNix("")
	if err != nil {
		return nil, err
	}
	stdout, err := run(ctx, nix, pathInfoArgs(store, paths), nil)
	if err != nil {
		return nil, fmt.Errorf("list closure of %s: %w", strings.Join(paths, " "), err)
	}
	infos, err := parsePathInfo(stdout)
	if err != nil {
		return nil, fmt.Errorf("list closure of %s: %w", strings.Join(paths, " "), err)
	}
	return infos, nil
}

// commandError is a failed nix invocation with its stderr.
type commandError struct {
	argv   []string
	err    error
	stderr string
}

func (e *commandError) Error() string {
	s := fmt.Sprintf("%s: %v", strings.Join(e.argv, " "), e.err)
	if e.stderr != "" {
		s += "\n" + e.stderr
	}
	return s
}

func (e *commandError) Unwrap() error { return e.err }

// run runs argv with argv[0] replaced by nix and returns its stdout.
func run(ctx context.Context, nix string, argv []string, live io.Writer) ([]byte, error) {
	cmd := exec.CommandContext(ctx, nix, argv[1:]...)
	var stdout bytes.Buffer
	stderr := &tailBuffer{max: stderrTail}
	cmd.Stdout = &stdout
	if live != nil {
		cmd.Stderr = io.MultiWriter(stderr, live)
	} else {
		cmd.Stderr = stderr
	}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		} else if m := buildUsersMissing.FindStringSubmatch(stderr.String()); m != nil {
			err = fmt.Errorf("%w (group %q; %v)", ErrBuildUsers, m[1], err)
		}
		return nil, &commandError{argv: argv, err: err, stderr: strings.TrimSpace(stderr.String())}
	}
	return stdout.Bytes(), nil
}

// buildError names what failed: the step and attribute when Nix's message
// points at one of them (or only one was built), all of them otherwise.
func buildError(attrs []string, o Options, err error) error {
	var ce *commandError
	stderr := ""
	if errors.As(err, &ce) {
		stderr = ce.stderr
	}
	culprits := attrs
	if len(attrs) > 1 {
		var named []string
		for _, a := range attrs {
			if mentions(stderr, a) {
				named = append(named, a)
			}
		}
		if len(named) > 0 {
			culprits = named
		}
	}
	var what []string
	for _, a := range culprits {
		if step, ok := o.Steps[a]; ok {
			what = append(what, fmt.Sprintf("step %q (attribute %s)", step, a))
		} else {
			what = append(what, "attribute "+a)
		}
	}
	return fmt.Errorf("nix build of %s: %w", strings.Join(what, ", "), err)
}

// mentions reports whether nix's stderr names attr: as the attribute
// itself, or as a derivation named after its last component.
func mentions(stderr, attr string) bool {
	if strings.Contains(stderr, "#"+attr) || strings.Contains(stderr, "'"+attr+"'") {
		return true
	}
	last := attr[strings.LastIndexByte(attr, '.')+1:]
	return strings.Contains(stderr, "-"+last+".drv'")
}

// parseBuildJSON parses `nix build --json`: one entry per installable, in
// the order they were given.
func parseBuildJSON(b []byte, attrs []string) ([]Output, error) {
	var raw []struct {
		DrvPath string            `json:"drvPath"`
		Outputs map[string]string `json:"outputs"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("parse nix build --json output: %w", err)
	}
	if len(raw) != len(attrs) {
		return nil, fmt.Errorf("nix build --json listed %d results for %d attributes", len(raw), len(attrs))
	}
	outs := make([]Output, len(raw))
	for i, r := range raw {
		out, ok := r.Outputs["out"]
		if !ok || r.DrvPath == "" {
			return nil, fmt.Errorf("nix build --json: attribute %s has no drvPath or no out output", attrs[i])
		}
		outs[i] = Output{Attr: attrs[i], DrvPath: r.DrvPath, Out: out, Outputs: r.Outputs}
	}
	return outs, nil
}

type rawPathInfo struct {
	Path       string   `json:"path"`
	NarHash    string   `json:"narHash"`
	NarSize    int64    `json:"narSize"`
	References []string `json:"references"`
}

// parsePathInfo parses `nix path-info --json`: Nix up to 2.18 prints an
// array of objects with a "path" field, newer Nix an object keyed by path
// (null for a path that is not valid). The result is sorted by path and
// every NarHash normalised by normaliseNarHash.
func parsePathInfo(b []byte) ([]PathInfo, error) {
	var raws []rawPathInfo
	trimmed := bytes.TrimSpace(b)
	switch {
	case bytes.HasPrefix(trimmed, []byte("[")):
		if err := json.Unmarshal(trimmed, &raws); err != nil {
			return nil, fmt.Errorf("parse nix path-info --json: %w", err)
		}
	case bytes.HasPrefix(trimmed, []byte("{")):
		var byPath map[string]*rawPathInfo
		if err := json.Unmarshal(trimmed, &byPath); err != nil {
			return nil, fmt.Errorf("parse nix path-info --json: %w", err)
		}
		for p, r := range byPath {
			if r == nil {
				return nil, fmt.Errorf("nix path-info: %s is not a valid store path", p)
			}
			r.Path = p
			raws = append(raws, *r)
		}
	default:
		return nil, fmt.Errorf("parse nix path-info --json: neither an array nor an object: %.80q", trimmed)
	}
	infos := make([]PathInfo, 0, len(raws))
	for _, r := range raws {
		if r.Path == "" {
			return nil, errors.New("nix path-info --json: an entry has no path")
		}
		h, err := normaliseNarHash(r.NarHash)
		if err != nil {
			return nil, fmt.Errorf("nix path-info: %s: %w", r.Path, err)
		}
		refs := append([]string{}, r.References...)
		sort.Strings(refs)
		infos = append(infos, PathInfo{Path: r.Path, NarHash: h, NarSize: r.NarSize, References: refs})
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Path < infos[j].Path })
	return infos, nil
}

// normaliseNarHash turns a sha256 NAR hash as Nix prints it (SRI
// "sha256-<base64>", or "sha256:" with base32 or base16) into
// "sha256:<nix base32>".
func normaliseNarHash(s string) (string, error) {
	algo := nixhash.SHA256
	h, err := nixhash.ParseAny(s, &algo)
	if err != nil {
		return "", fmt.Errorf("parse NAR hash %q: %w", s, err)
	}
	return nixhash.MustNewHash(algo, h.Digest()).Format(nixhash.NixBase32, true), nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max       int
	buf       []byte
	truncated bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.truncated = true
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	if t.truncated {
		return "[...]\n" + string(t.buf)
	}
	return string(t.buf)
}
