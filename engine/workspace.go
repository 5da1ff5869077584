package engine

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agentsandbox/agentsandbox/fsx/jobfs"
	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// stepDirs are a step's host directories inside the run directory.
type stepDirs struct {
	Workspace string // mounted read-write at /workspace
	Control   string // job.json, result.json, logs
}

func newStepDirs(runDir, step string) (stepDirs, error) {
	d := stepDirs{
		Workspace: filepath.Join(runDir, "steps", step, "workspace"),
		Control:   filepath.Join(runDir, "steps", step, "control"),
	}
	for _, p := range []string{d.Workspace, d.Control} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			return d, fmt.Errorf("create step directory: %w", err)
		}
	}
	return d, nil
}

// placement is one thing copied into a workspace before the step runs.
type placement struct {
	// From is the host path of an input; empty for a needed step's output,
	// which is restored from the NAR stored when that step ended (Digest).
	From string
	To   string // workspace-relative path
	What string // for errors: `input "data"` or `output "model.bin" of step "train"`
	// Digest is what the record pins for it: the input's digest, or the
	// NAR hash of the needed step's output.
	Digest record.Digest
}

// placements lists what step's workspace receives: its declared inputs and
// the declared outputs of the steps it needs, nothing else. Two sources
// landing on one path is an error the user must fix in the workflow.
//
// digests holds "input:NAME" and "output:STEP:PATH" keys.
func placements(step workflow.Step, inputDirs map[string]string, inputs map[string]workflow.Input, steps map[string]workflow.Step, digests map[string]record.Digest) ([]placement, error) {
	var ps []placement
	for _, name := range step.Inputs {
		in, ok := inputs[name]
		if !ok {
			return nil, fmt.Errorf("step %q: input %q is not declared", step.Name, name)
		}
		ps = append(ps, placement{From: inputDirs[name], To: in.Dest, What: fmt.Sprintf("input %q", name), Digest: digests["input:"+name]})
	}
	for _, need := range step.Needs {
		for _, out := range steps[need].Outputs {
			ps = append(ps, placement{
				To:     out,
				What:   fmt.Sprintf("output %q of step %q", out, need),
				Digest: digests["output:"+need+":"+out],
			})
		}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].To < ps[j].To })
	// Sorted, a path's nested paths follow it, but not always next to it:
	// "a-c" sorts between "a" and "a/b". Compare each with every path
	// after it that it prefixes.
	for i := range ps {
		for j := i + 1; j < len(ps) && strings.HasPrefix(ps[j].To, ps[i].To); j++ {
			a, b := ps[i], ps[j]
			if a.To == b.To || strings.HasPrefix(b.To, a.To+"/") {
				return nil, fmt.Errorf("step %q: %s and %s both land at %q in the workspace: give one of them another dest or path", step.Name, a.What, b.What, b.To)
			}
		}
	}
	return ps, nil
}

// assemble places the placements into the fresh workspace ws and gives the
// whole tree to the job's user, so the job can read and write it.
//
// A needed step's output is restored from the NAR stored when that step
// ended, never read from that step's workspace, which its job controlled:
// the next step gets exactly what the record pins. Every write goes through
// jobfs beneath ws, never through a symlink: a symlink that one placement
// brings (an input's, or one in an output the previous job made) cannot
// redirect the next placement out of the workspace, even if placements'
// nesting check were bypassed. The chown goes through jobfs too: ws itself
// must be a directory, not a symlink, and no symlink beneath it is
// followed.
func assemble(store *record.Store, ws string, ps []placement, uid, gid int) error {
	root, err := jobfs.Open(ws)
	if err != nil {
		return fmt.Errorf("open the workspace: %w", err)
	}
	defer root.Close()
	dst := root.Restorer(-1, -1)
	for _, p := range ps {
		if p.From == "" {
			if p.Digest == (record.Digest{}) {
				return fmt.Errorf("place %s: no stored NAR for it", p.What)
			}
			if err := store.RestoreNAR(record.NarHash(p.Digest), dst, p.To); err != nil {
				return fmt.Errorf("place %s at %q: %w", p.What, p.To, err)
			}
			continue
		}
		if err := copyTree(p.From, dst, p.To); err != nil {
			return fmt.Errorf("place %s at %q: %w", p.What, p.To, err)
		}
	}
	if os.Geteuid() != 0 {
		return nil // an unprivileged caller runs jobs as itself
	}
	if err := root.LchownAll(".", uid, gid); err != nil {
		return fmt.Errorf("give the workspace to uid %d: %w", uid, err)
	}
	return nil
}

// copyTree copies a file, symlink or directory tree from the host path src
// to rel beneath dst, keeping permission bits and symlinks as they are
// (a symlink is copied as a symlink, never followed, src itself included).
// src is a fetched input, which the host made; dst is written through
// jobfs, never through a symlink, and nothing there is replaced.
func copyTree(src string, dst *jobfs.Restorer, rel string) error {
	if dir := path.Dir(rel); dir != "." {
		if err := dst.MkdirAll(dir); err != nil {
			return err
		}
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		sub, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := path.Join(rel, filepath.ToSlash(sub))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return dst.Mkdir(target, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return dst.Symlink(link, target)
		case d.Type().IsRegular():
			return copyFile(p, dst, target, info.Mode().Perm())
		default:
			return fmt.Errorf("%s: not a regular file, directory or symlink", p)
		}
	})
}

func copyFile(src string, dst *jobfs.Restorer, rel string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := dst.Create(rel, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// SourceDateEpoch is the SOURCE_DATE_EPOCH every job gets unless its step
// sets its own: 1980-01-01T00:00:00Z, the earliest time a ZIP archive can
// hold and the value nixpkgs' builds use, so tools that honour the variable
// stamp the same time into every run's outputs (docs/records.md).
const SourceDateEpoch = "315532800"

// jobFor builds the job the agent runs for step: the run script under
// sh (from PATH) in /workspace, as the unprivileged job user, with exactly the
// step's environment on top of a small fixed base. The base pins what a
// job would otherwise take from the host and what differs between runs:
// time zone, locale and SOURCE_DATE_EPOCH.
func jobFor(step workflow.Step, envPath string) guest.Job {
	path := "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
	if envPath != "" {
		path = envPath + "/bin:" + path
	}
	env := map[string]string{
		"PATH":              path,
		"HOME":              "/tmp",
		"TMPDIR":            "/tmp",
		"LANG":              "C.UTF-8",
		"LC_ALL":            "C.UTF-8",
		"TZ":                "UTC",
		"SOURCE_DATE_EPOCH": SourceDateEpoch,
		"AGENTSANDBOX_STEP": step.Name,
	}
	for k, v := range step.Env {
		env[k] = v
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	list := make([]string, 0, len(keys))
	for _, k := range keys {
		list = append(list, k+"="+env[k])
	}
	return guest.Job{
		Version:   guest.ProtocolVersion,
		Step:      step.Name,
		Command:   []string{"sh", "-c", step.Run}, // sh from PATH: the host's, or the step env's shell
		Env:       list,
		Workdir:   guest.WorkspaceMount,
		UID:       guest.DefaultUID,
		GID:       guest.DefaultGID,
		TimeoutMS: step.Resources.TimeoutMS,
	}
}
