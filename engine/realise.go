package engine

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

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
	// since microvm.nix bakes -enable-kvm into the default one.
	KVM    bool
	Gen    nixgen.Options
	Stderr io.Writer // Nix's progress output; nil discards it
}

// Realise builds the runner (vm) or package environment (namespace) of each
// step and lists its closure with NAR hashes.
func (n *NixRealiser) Realise(ctx context.Context, steps []workflow.Step) (map[string]Realised, error) {
	dir := n.FlakeDir
	if dir == "" {
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
	var attrs []string
	owner := map[string]string{}
	kind := map[string]bool{} // attr → is a runner
	for _, s := range steps {
		attr, runner := n.attrFor(s)
		kind[attr] = runner
		attrs = append(attrs, attr)
		owner[attr] = s.Name
	}
	outs, err := nixbuild.Build(ctx, dir, attrs, nixbuild.Options{
		Offline:    n.Offline,
		UpdateLock: n.UpdateLock,
		LockFile:   n.WorkflowPath + ".lock",
		Steps:      owner,
		Stderr:     n.Stderr,
	})
	if err != nil {
		return nil, &BuildError{Err: err}
	}
	got := map[string]Realised{}
	for _, o := range outs {
		step := owner[o.Attr]
		infos, err := nixbuild.Closure(ctx, []string{o.Out})
		if err != nil {
			return nil, &BuildError{Err: fmt.Errorf("step %q: list closure of %s: %w", step, o.Out, err)}
		}
		r := Realised{}
		if kind[o.Attr] {
			r.Runner = o.Out
		} else {
			r.EnvPath = o.Out
		}
		for _, pi := range infos {
			h, err := record.ParseNarHash(pi.NarHash)
			if err != nil {
				return nil, &BuildError{Err: fmt.Errorf("step %q: closure path %s: %w", step, pi.Path, err)}
			}
			r.Closure = append(r.Closure, record.StorePath{Path: pi.Path, NarHash: h, NarSize: pi.NarSize})
		}
		got[step] = r
	}
	for _, s := range steps {
		if _, ok := got[s.Name]; !ok {
			return nil, &BuildError{Err: fmt.Errorf("step %q: nix build reported no output for it", s.Name)}
		}
	}
	return got, nil
}

// attrFor is the flake attribute that realises step s, and whether it is a
// VM runner (else a package environment).
func (n *NixRealiser) attrFor(s workflow.Step) (attr string, runner bool) {
	if s.Isolation != workflow.IsolationVM {
		return n.Gen.EnvAttr(s.Name), false
	}
	if !n.KVM && s.Hypervisor == workflow.HypervisorQEMU {
		return n.Gen.TCGRunnerAttr(s.Name), true
	}
	return n.Gen.RunnerAttr(s.Name), true
}

// GenDirFor is the stable directory for w's generated flake under root.
func GenDirFor(root string, w *workflow.Workflow) string {
	return filepath.Join(root, "flakes", w.Hash().String()[len("sha256:"):][:32])
}
