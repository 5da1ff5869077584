package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentsandbox/agentsandbox/nixbuild"
	"github.com/agentsandbox/agentsandbox/nixgen"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// NixRealiser realises steps from a flake: the one nixgen generates for the
// workflow, or a user's own (FlakeDir), such as an edited `render` output.
type NixRealiser struct {
	Workflow *workflow.Workflow
	// WorkflowPath names the lock file: WorkflowPath + ".lock" pins every
	// flake input and is meant to be committed next to the workflow.
	WorkflowPath string
	// FlakeDir, when set, is built instead of a generated flake.
	FlakeDir string
	// GenDir is where the generated flake is written. A stable directory
	// per workflow hash keeps Nix's evaluation cache warm across runs.
	GenDir     string
	Offline    bool
	UpdateLock bool
	// KVM says whether KVM runs guests here. Without it, qemu steps are
	// realised as their software-emulation runner (nixgen's TCGRunnerAttr),
	// since microvm.nix bakes -enable-kvm into the default one; KVMReason
	// says why not, and the runner's note (Realised.RunnerNote) repeats it.
	KVM       bool
	KVMReason string
	Gen       nixgen.Options
	// Share is how realisations are shared with other machines:
	// substituters, remote builders, and a binary cache every closure
	// realised here is pushed to, signed (docs/nix-cache.md).
	Share  nixbuild.Sharing
	Stderr io.Writer // Nix's progress output; nil discards it
}

// Realise builds the runner (vm) or package environment (namespace) of each
// step and lists its closure with NAR hashes.
func (n *NixRealiser) Realise(ctx context.Context, steps []workflow.Step) (map[string]Realised, error) {
	dir := n.FlakeDir
	if dir == "" {
		// A Nix too old for the flake fails here, with what to do, rather
		// than in nixpkgs' evaluation. (A flake of the user's own says
		// what it needs itself.)
		lock := n.WorkflowPath + ".lock"
		if n.UpdateLock || n.WorkflowPath == "" {
			lock = ""
		}
		if err := CheckNix(ctx, n.Workflow, lock); err != nil {
			return nil, err
		}
		files, err := nixgen.Generate(n.Workflow, n.Gen)
		if err != nil {
			return nil, fmt.Errorf("generate flake: %w", err)
		}
		dir = n.GenDir
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("generate flake: %w", err)
		}
		if err := files.WriteDir(dir); err != nil {
			return nil, fmt.Errorf("generate flake: %w", err)
		}
	}
	// Steps of one environment share one attribute: build each once.
	var attrs []string
	users := map[string][]string{}     // attr → the steps it realises
	kind := map[string]bool{}          // attr → is a runner
	env := map[string]nixgen.EnvHash{} // step → its environment
	notes := map[string]string{}       // attr → why this runner
	for _, s := range steps {
		attr, runner, h, note, err := n.attrFor(s)
		if err != nil {
			return nil, &BuildError{Err: fmt.Errorf("step %q: %w", s.Name, err)}
		}
		if _, ok := users[attr]; !ok {
			attrs = append(attrs, attr)
		}
		users[attr] = append(users[attr], s.Name)
		kind[attr] = runner
		notes[attr] = note
		env[s.Name] = h
	}
	owner := map[string]string{}
	for attr, names := range users {
		owner[attr] = ownerOf(names)
	}
	outs, err := nixbuild.Build(ctx, dir, attrs, nixbuild.Options{
		Offline:    n.Offline,
		UpdateLock: n.UpdateLock,
		LockFile:   n.WorkflowPath + ".lock",
		Steps:      owner,
		Share:      n.Share,
		Stderr:     n.Stderr,
	})
	if err != nil {
		return nil, &BuildError{Err: err}
	}
	// The lock the build used: Nix wrote it, or it was pinned from the
	// workflow's lock file; a flake without inputs may have none.
	lock, err := os.ReadFile(filepath.Join(dir, "flake.lock"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, &BuildError{Err: fmt.Errorf("read the flake lock: %w", err)}
	}
	got := map[string]Realised{}
	for _, o := range outs {
		names, ok := users[o.Attr]
		if !ok {
			continue
		}
		infos, err := nixbuild.Closure(ctx, []string{o.Out})
		if err != nil {
			return nil, &BuildError{Err: fmt.Errorf("%s: list closure of %s: %w", stepList(names), o.Out, err)}
		}
		r := Realised{Lock: lock}
		if kind[o.Attr] {
			r.Runner, r.RunnerNote = o.Out, notes[o.Attr]
		} else {
			r.EnvPath = o.Out
		}
		for _, pi := range infos {
			h, err := record.ParseNarHash(pi.NarHash)
			if err != nil {
				return nil, &BuildError{Err: fmt.Errorf("%s: closure path %s: %w", stepList(names), pi.Path, err)}
			}
			r.Closure = append(r.Closure, record.StorePath{Path: pi.Path, NarHash: h, NarSize: pi.NarSize})
		}
		for _, name := range names {
			rs := r
			rs.Closure = slices.Clone(r.Closure)
			d := record.Digest(env[name])
			rs.Environment = &d
			got[name] = rs
		}
	}
	for _, s := range steps {
		if _, ok := got[s.Name]; !ok {
			return nil, &BuildError{Err: fmt.Errorf("step %q: nix build reported no output for it", s.Name)}
		}
	}
	if n.Share.Push != "" {
		paths := make([]string, len(outs))
		for i, o := range outs {
			paths[i] = o.Out
		}
		if err := nixbuild.Push(ctx, n.Share, "", "", paths); err != nil {
			return nil, &BuildError{Err: err}
		}
		if n.Stderr != nil {
			fmt.Fprintf(n.Stderr, "pushed the closures of %d realised paths, signed, to %s\n", len(paths), n.Share.Push)
		}
	}
	return got, nil
}

// stepList names the steps an attribute realises, for errors: `step "a"`,
// or `steps "a", "b" and 3 more`.
func stepList(names []string) string {
	switch len(names) {
	case 1:
		return fmt.Sprintf("step %q", names[0])
	case 2:
		return fmt.Sprintf("steps %q and %q", names[0], names[1])
	default:
		return fmt.Sprintf("steps %q, %q and %d more", names[0], names[1], len(names)-2)
	}
}

// ownerOf is nixbuild's name for the steps of one attribute: "a", or
// "a, b and 3 more" (nixbuild quotes it after "step").
func ownerOf(names []string) string {
	if len(names) <= 2 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s, %s and %d more", names[0], names[1], len(names)-2)
}

// attrFor is the flake attribute that realises step s (its environment's),
// whether it is a VM runner (else a package environment), the
// environment, and why this runner when the realiser chose it.
func (n *NixRealiser) attrFor(s workflow.Step) (attr string, runner bool, h nixgen.EnvHash, note string, err error) {
	e, err := nixgen.EnvironmentOf(&s)
	if err != nil {
		return "", false, h, "", err
	}
	h = e.Hash()
	if s.Isolation != workflow.IsolationVM {
		return n.Gen.EnvAttr(h), false, h, "", nil
	}
	if !n.KVM && s.Hypervisor == workflow.HypervisorQEMU {
		note = "its software-emulation runner was built"
		if n.KVMReason != "" {
			note += " because KVM cannot run microvm.nix's guests here: " + n.KVMReason
		}
		return n.Gen.TCGRunnerAttr(h), true, h, note, nil
	}
	return n.Gen.RunnerAttr(h), true, h, "", nil
}

// GenDirFor is the stable directory for w's generated flake under root.
func GenDirFor(root string, w *workflow.Workflow) string {
	return filepath.Join(root, "flakes", w.Hash().String()[len("sha256:"):][:32])
}
