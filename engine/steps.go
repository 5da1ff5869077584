package engine

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/seccomp"
)

func runStatus(steps []record.Step, err error) record.Status {
	if err != nil {
		return record.StatusError
	}
	for _, s := range steps {
		if s.Status != record.StatusSucceeded {
			return record.StatusFailed
		}
	}
	return record.StatusSucceeded
}

// stepRecords lists every step of the run in workflow order: those that ran
// with their figures, the others as skipped.
func (r *run) stepRecords(outcomes []Outcome) []record.Step {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []record.Step
	for _, s := range r.steps {
		if sr := r.records[s.Name]; sr != nil {
			out = append(out, *sr)
			continue
		}
		rs := record.Step{Name: s.Name, Isolation: string(s.Isolation), Status: record.StatusSkipped, ExitCode: -1}
		for _, oc := range outcomes {
			if oc.Step == s.Name {
				rs.Detail = oc.Skipped
				if oc.Ran { // ran but stopped by an infrastructure error
					rs.Status, rs.Detail = record.StatusError, "the step's sandbox failed"
				}
			}
		}
		out = append(out, rs)
	}
	return out
}

// fillStep copies the backend's result into the step record.
func fillStep(sr *record.Step, res *vmrunner.StepResult) {
	sr.Isolation = string(res.Isolation)
	sr.Hypervisor = string(res.Hypervisor)
	sr.Accel, sr.AccelReason = res.Accel, res.AccelReason
	sr.Started, sr.Finished = res.Started.UTC(), res.Finished.UTC()
	sr.Status = record.Status(res.Status)
	sr.ExitCode = -1
	if res.HasResult {
		sr.ExitCode = res.Result.ExitCode
		sr.Signal = res.Result.Signal
	}
	sr.TimedOut = res.Status == vmrunner.StatusTimeout
	sr.OOM = res.Status == vmrunner.StatusOOM || res.Usage.OOMKills > 0
	sr.Detail = res.Detail
	if sr.Detail == "" && res.HasResult {
		sr.Detail = res.Result.Error
	}
	sr.Usage = record.Usage{
		PeakMemoryBytes: res.Usage.PeakMemoryBytes,
		CPUTimeNs:       res.Usage.CPUTime.Nanoseconds(),
		PidsPeak:        res.Usage.PidsPeak,
		OOMKills:        res.Usage.OOMKills,
		ThrottledNs:     res.Usage.ThrottledTime.Nanoseconds(),
	}
}

// checkSeccompAllow refuses policy data that grants a step a system call
// the jail's filter cannot be relaxed by (seccomp.Relaxable), before any
// step runs.
func checkSeccompAllow(d *policy.Decision) error {
	p, err := seccomp.Default()
	if err != nil {
		return err
	}
	for step, names := range d.SeccompAllow {
		if _, err := p.Relax(names); err != nil {
			return fmt.Errorf("policy data agentsandbox.seccomp.allow[%q]: %w", step, err)
		}
	}
	return nil
}

func policyRecord(d *policy.Decision) *record.Policy {
	return &record.Policy{
		DecisionID:   d.ID.String(),
		BundleDigest: d.BundleDigest.String(),
		InputDigest:  d.InputDigest.String(),
		Allowed:      d.Allowed(),
		Deny:         nonNil(d.Deny),
		Warn:         nonNil(d.Warn),
		EvalTimeNs:   d.EvalTime.Nanoseconds(),
		Cached:       d.Cached,
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func storePaths(c []record.StorePath) []string {
	var out []string
	for _, p := range c {
		out = append(out, p.Path)
	}
	sort.Strings(out)
	return out
}

// hostRootFiles are what hostRootFingerprint hashes, those that exist.
var hostRootFiles = []string{"/etc/os-release", "/var/lib/dpkg/status", "/lib/apk/db/installed", "/var/lib/rpm/rpmdb.sqlite"}

// hostRootFingerprint pins the host root a namespace step ran on when there
// is no Nix closure: the sha256 over the OS release and the package
// database, which change whenever what is under /usr changes by package.
// Files changed by hand outside the package manager are not covered; the
// record documents that (docs/records.md).
//
// The digest is kept while the files keep their identity (device, inode,
// size, modification and change times, read again for every step): hashing
// Debian's 650 KiB dpkg status took 1 ms, once per step.
func hostRootFingerprint() (record.Digest, error) {
	key := hostRootKey()
	fingerprints.Lock()
	if key != "" && key == fingerprints.key {
		d := fingerprints.d
		fingerprints.Unlock()
		return d, nil
	}
	fingerprints.Unlock()
	d, err := hashHostRoot()
	if err != nil {
		return d, err
	}
	// Kept only when nothing changed while it was read.
	if key != "" && key == hostRootKey() {
		fingerprints.Lock()
		fingerprints.key, fingerprints.d = key, d
		fingerprints.Unlock()
	}
	return d, nil
}

var fingerprints struct {
	sync.Mutex
	key string
	d   record.Digest
}

// hostRootKey identifies the current hostRootFiles; "" when one cannot be
// looked at (then nothing is cached).
func hostRootKey() string {
	var b strings.Builder
	for _, p := range hostRootFiles {
		fi, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(&b, "%s -\n", p)
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if err != nil || !ok {
			return ""
		}
		fmt.Fprintf(&b, "%s %d %d %d %d.%09d %d.%09d\n", p, st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
	}
	return b.String()
}

func hashHostRoot() (record.Digest, error) {
	h := sha256.New()
	for _, p := range hostRootFiles {
		f, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return record.Digest{}, fmt.Errorf("fingerprint host root: %w", err)
		}
		fmt.Fprintf(h, "%s\x00", p)
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return record.Digest{}, fmt.Errorf("fingerprint host root: %w", err)
		}
	}
	var d record.Digest
	copy(d[:], h.Sum(nil))
	return d, nil
}

func encodeJob(j guest.Job) ([]byte, error) {
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode job: %w", err)
	}
	return append(b, '\n'), nil
}
