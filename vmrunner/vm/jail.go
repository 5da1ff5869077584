// jail.go holds the jail microvm-run runs in: the hypervisor's
// credentials, the Nix store closure it binds, its command, environment
// and writable paths.

package vm

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/agentsandbox/agentsandbox/nixbuild"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/jail"
	"github.com/agentsandbox/agentsandbox/vmrunner/jail/jailwire"
)

// The hypervisor's credentials. 9p shares with securityModel "none" (what
// nixgen generates) store every file the guest creates as the hypervisor's
// uid and report host ownership to the guest, so the hypervisor runs as the
// job's own uid: what the job creates is the job's on both sides. A uid-0
// job gets HypervisorFallbackUID instead; the hypervisor never runs as root.
// Its group is HypervisorGID, which owns the control directory (root,
// mode 0770): the hypervisor can write result.json there, the job (another
// group) cannot even list it.
const (
	HypervisorFallbackUID = 65533 // "agentsandbox-vm"
	HypervisorGID         = 65533 // "agentsandbox-vm"
)

// HypervisorUID is the uid the hypervisor of a job run as jobUID runs as.
func HypervisorUID(jobUID int) int {
	if jobUID <= 0 {
		return HypervisorFallbackUID
	}
	return jobUID
}

// runnerClosure is what the jail binds of the Nix store: the spec's closure
// paths (the runner's closure, from the pipeline), else the closure Nix
// reports for a runner in the store; a runner outside the store is bound
// by jailConfig on its own.
func runnerClosure(ctx context.Context, spec vmrunner.StepSpec) ([]string, error) {
	if len(spec.ClosurePaths) > 0 || !strings.HasPrefix(spec.Runner, "/nix/store/") {
		return spec.ClosurePaths, nil
	}
	infos, err := nixbuild.Closure(ctx, []string{storePathOf(spec.Runner)})
	if err != nil {
		return nil, fmt.Errorf("list the runner's closure for its jail: %w", err)
	}
	paths := make([]string, len(infos))
	for i, pi := range infos {
		paths[i] = pi.Path
	}
	return paths, nil
}

// storePathOf cuts a path inside the store to its /nix/store/<hash>-<name>.
func storePathOf(p string) string {
	parts := strings.SplitN(strings.TrimPrefix(filepath.Clean(p), "/nix/store/"), "/", 2)
	return "/nix/store/" + parts[0]
}

// jailConfig is the exec-mode jail microvm-run runs in (see the package
// documentation); the caller adds the netns and the console. Share sources
// are bound at their own paths, where the working directory's links point.
func jailConfig(spec vmrunner.StepSpec, ri RunnerInfo, accel, workDir, rootDir string, closure []string) jail.Config {
	x := &jailwire.ExecSpec{
		Argv:     runnerCommand(ri.Dir),
		Env:      runnerEnv(accel),
		Dir:      workDir,
		UID:      HypervisorUID(spec.Job.UID),
		GID:      HypervisorGID,
		Writable: []string{workDir, absPath(spec.ControlDir), absPath(spec.Workspace)},
	}
	var paths []string
	for _, p := range closure {
		paths = append(paths, storePathOf(p))
	}
	if strings.HasPrefix(ri.Dir, "/nix/store/") {
		paths = append(paths, storePathOf(ri.Dir))
	} else {
		x.ReadOnly = []string{absPath(ri.Dir)}
	}
	return jail.Config{
		RootDir:      rootDir,
		Hostname:     spec.Step.Name,
		ClosurePaths: paths,
		TmpBytes:     JailTmpBytes,
		Exec:         x,
	}
}

// absPath is p made absolute (as linkShares links it) and clean.
func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return filepath.Clean(p)
}

// JailTmpBytes sizes the hypervisor's /tmp in its jail (qemu writes none
// for these runners; it is there for runners that do).
const JailTmpBytes = 16 << 20

// runnerCommand is what the jail runs: microvm-run itself. The jail holds
// it until it is in its cgroup.
func runnerCommand(runner string) []string {
	return []string{filepath.Join(runner, "bin", "microvm-run")}
}

// runnerEnv is the runner's environment.
func runnerEnv(accel string) []string {
	return []string{"PATH=/usr/bin:/bin", "ACCEL=" + accel}
}
