package pipeline

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentsandbox/agentsandbox/internal/atomicfile"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentsandbox/agentsandbox/vmrunner"
)

// ownerFile in a run directory names the process that owns it, so GCRuns
// can tell a live run from the leftovers of one killed with SIGKILL.
const ownerFile = "owner.json"

func writeOwner(runDir, runID string) error {
	b, err := json.Marshal(vmrunner.NewState(runID, "run"))
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(runDir, ownerFile), b, 0o600)
}

// GCRuns removes the run directories (workspaces, control directories,
// fetched inputs) under runRoot whose owning apply is gone. A directory with
// anything still mounted below it is left alone and reported, never
// removed through the mount.
func GCRuns(runRoot string) (removed []string, err error) {
	entries, err := os.ReadDir(runRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("gc runs: %w", err)
	}
	mounts, err := mountPoints()
	if err != nil {
		return nil, fmt.Errorf("gc runs: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(runRoot, e.Name())
		var owner vmrunner.State
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err == nil {
			if err := json.Unmarshal(b, &owner); err != nil {
				errs = append(errs, fmt.Errorf("gc run %s: read owner: %w", dir, err))
				continue
			}
		}
		if owner.OwnerAlive() {
			continue
		}
		if m := mountedBelow(mounts, dir); m != "" {
			errs = append(errs, fmt.Errorf("gc run %s: %s is still mounted; unmount it first", dir, m))
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("gc run %s: %w", dir, err))
			continue
		}
		removed = append(removed, "dir "+dir)
	}
	return removed, errors.Join(errs...)
}

func mountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 {
			out = append(out, unescapeMount(fields[4]))
		}
	}
	return out, sc.Err()
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

func mountedBelow(mounts []string, dir string) string {
	for _, m := range mounts {
		if m == dir || strings.HasPrefix(m, dir+"/") {
			return m
		}
	}
	return ""
}
