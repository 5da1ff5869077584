package hoststate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/agentsandbox/agentsandbox/netns"
)

// CgroupRoot is the parent of every step's cgroup, in every hierarchy.
const CgroupRoot = "/agentsandbox"

// MaxNetnsName is the longest name NetnsName returns.
const MaxNetnsName = 40

// alphabet is how one kind of host name spells a string it did not choose:
// which characters it keeps and what becomes of the others.
type alphabet int

const (
	// netnsAlphabet folds upper case and keeps [a-z0-9_.-]; anything else
	// becomes '-'.
	netnsAlphabet alphabet = iota
	// cgroupAlphabet keeps [A-Za-z0-9_-]; anything else becomes '_'.
	cgroupAlphabet
	// fileAlphabet keeps [A-Za-z0-9_.-]; anything else becomes %xx for each
	// of its bytes, so distinct strings keep distinct names.
	fileAlphabet
)

// sanitize spells s in a. It is the one function that makes a run id or a
// step name part of a host name; no result holds '/' or NUL. Each alphabet
// is what that kind of name has always been, so the names of existing runs
// (and their state files, which gc reads) stay the same.
func sanitize(s string, a alphabet) string {
	if a == netnsAlphabet {
		s = strings.ToLower(s)
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		raw := s[i : i+w]
		i += w
		lowerOrDigit := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		upper := r >= 'A' && r <= 'Z'
		switch {
		case lowerOrDigit || r == '-' || r == '_':
			b.WriteRune(r)
		case upper && a != netnsAlphabet: // netns folded it above
			b.WriteRune(r)
		case r == '.' && a != cgroupAlphabet:
			b.WriteRune(r)
		case a == netnsAlphabet:
			b.WriteByte('-')
		case a == cgroupAlphabet:
			b.WriteByte('_')
		default:
			// Each byte, so that distinct strings keep distinct names
			// (also when s is not UTF-8).
			for j := 0; j < len(raw); j++ {
				fmt.Fprintf(&b, "%%%02x", raw[j])
			}
		}
	}
	return b.String()
}

// NetnsName is the network namespace of one step of one run, a file in
// netns.RunDir: netns.Prefix ("asb-") + the first 8 characters of runID +
// "-" + the step name.
//
// Characters outside [a-z0-9_.-] become '-', upper case is folded. When that
// changed the step name, or the result would be longer than MaxNetnsName,
// the step part is shortened and followed by 6 hex digits of the sha256 of
// the original step name, so distinct steps keep distinct names. The result
// is stable for the same inputs, never "." or "..", and never contains '/'.
func NetnsName(runID, step string) string {
	run := sanitize(runID, netnsAlphabet)
	if len(run) > 8 {
		run = run[:8]
	}
	if run == "" {
		run = "run"
	}
	base := netns.Prefix + run + "-"
	s := sanitize(step, netnsAlphabet)
	if s == step && s != "" && len(base)+len(s) <= MaxNetnsName {
		return base + s
	}
	sum := sha256.Sum256([]byte(step))
	suffix := hex.EncodeToString(sum[:3])
	room := MaxNetnsName - len(base) - 1 - len(suffix)
	if len(s) > room {
		s = s[:room]
	}
	s = strings.TrimRight(s, "-")
	if s == "" {
		return base + suffix
	}
	return base + s + "-" + suffix
}

// CgroupPath is the cgroup of one step of one run, the same in every
// hierarchy: CgroupRoot/<run>/<step>, with anything but letters, digits, '-'
// and '_' replaced by '_' (an empty part is "_"), so a name can never climb
// out with "..".
func CgroupPath(runID, step string) string {
	return RunCgroup(runID) + "/" + cgroupPart(step)
}

// RunCgroup is the parent of the cgroups of every step of run runID.
func RunCgroup(runID string) string { return CgroupRoot + "/" + cgroupPart(runID) }

func cgroupPart(s string) string {
	if p := sanitize(s, cgroupAlphabet); p != "" {
		return p
	}
	return "_"
}

// StateFileName is the name, in the state directory, of the state file of
// one step of one run: "state-<run>-<step>.json", each part spelled with
// anything but letters, digits, '-', '_' and '.' as %xx per byte (a step's
// workspace quota, step "STEP/workspace", is "state-<run>-STEP%2fworkspace.json").
func StateFileName(runID, step string) string {
	return statePrefix + sanitize(runID, fileAlphabet) + "-" + sanitize(step, fileAlphabet) + stateSuffix
}

const statePrefix, stateSuffix = "state-", ".json"

// QuotaStep is the step name under which a step's workspace quota keeps a
// state file of its own, beside the step's backend's (a step name cannot
// hold a slash).
func QuotaStep(step string) string { return step + "/workspace" }

// JailRoot is the namespace backend's (empty) root mount point for a step's
// jail, in jailDir.
func JailRoot(jailDir, runID, step string) string {
	return filepath.Join(jailDir, NetnsName(runID, step))
}

// VMWorkDir is the vm backend's working directory for a step (the runner's
// files and the hypervisor's sockets), in workDir.
func VMWorkDir(workDir, runID, step string) string {
	return filepath.Join(workDir, NetnsName(runID, step))
}

// VMRootDir is the root mount point of the jail that holds a step's
// hypervisor: VMWorkDir + ".root".
func VMRootDir(workDir, runID, step string) string {
	return VMWorkDir(workDir, runID, step) + ".root"
}
