package record

import "time"

// Version is the schema version this package writes. Decode refuses records
// of any other version; docs/records.md lists what changed between versions.
const Version = 1

// Status is how a run or a step ended. Step statuses mirror the runner's.
type Status string

const (
	StatusSucceeded Status = "succeeded" // every step (or the step) succeeded
	StatusFailed    Status = "failed"    // a job failed, was killed, or left no result
	StatusTimeout   Status = "timeout"   // a step ran past its timeout
	StatusOOM       Status = "oom"       // a step was killed for memory
	StatusSkipped   Status = "skipped"   // a step did not run because a step it needs failed
	StatusError     Status = "error"     // the run stopped on an infrastructure error
)

// Record is one apply. Its canonical encoding (Encode) is its identity.
//
// Times are kept to the nanosecond and encoded in UTC. Slices that are sets
// (inputs, steps, closures, outputs) are sorted by Encode, so the order in
// which a caller appends them does not change the id.
type Record struct {
	Version     int       `json:"version"`
	ToolVersion string    `json:"toolVersion"`
	Workflow    Workflow  `json:"workflow"`
	Policy      *Policy   `json:"policy,omitempty"` // nil: no policy was evaluated
	Host        Host      `json:"host"`
	Started     time.Time `json:"started"`
	Finished    time.Time `json:"finished"`
	Status      Status    `json:"status"`
	// Error is why the run stopped, when Status is error.
	Error string `json:"error,omitempty"`
	// Parent is the record this run re-ran, if any.
	Parent *ID     `json:"parent,omitempty"`
	Inputs []Input `json:"inputs"`
	Steps  []Step  `json:"steps"`
	// Sandbox is set for the record of a long-lived sandbox (agentsandbox
	// serve) instead of an apply: its one step is the sandbox itself, and
	// every action taken in it is an entry.
	Sandbox *Sandbox `json:"sandbox,omitempty"`
	// TraceID is the OpenTelemetry trace the run was part of (32 hex
	// digits), when tracing was on (docs/observability.md).
	TraceID string `json:"traceId,omitempty"`
	// Owner is the identity of `agentsandbox serve` whose sandbox or
	// workflow run this is (sandboxes.Identity: a name from the
	// identities file, "token", or "uid-N" on the unix socket); only it
	// and admins are shown the record. Empty for an apply and for
	// records written before identities existed, which keep their ids.
	Owner string `json:"owner,omitempty"`
}

// Sandbox is what happened in a long-lived sandbox, in order.
type Sandbox struct {
	ID     string            `json:"id"`
	Labels map[string]string `json:"labels,omitempty"`
	// Ended says why it stopped: killed, expired, idle, exited, server
	// stopped.
	Ended   string  `json:"ended"`
	Entries []Entry `json:"entries"`
}

// Entry is one action in a sandbox. Its content (command, env names,
// cwd, exit, usage, output digests, the policy decision; or the path and
// digest of a file written) is the blob Digest, canonical JSON, so each
// entry is content-addressed on its own (docs/records.md).
type Entry struct {
	Seq    int       `json:"seq"`
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"` // exec, file_put, file_remove, file_mkdir, file_move, snapshot, restore
	Digest Digest    `json:"digest"`
	// Summary is a one-line description for people (records show).
	Summary string `json:"summary"`
}

// Action is the content of an Entry's blob.
type Action struct {
	Kind string    `json:"kind"`
	Time time.Time `json:"time"`
	// exec: what ran (the environment's names only, never its values),
	// how it ended, and its output streams as blobs (each kept up to the
	// host's log limit, like a step's logs).
	Command    []string `json:"command,omitempty"`
	Cwd        string   `json:"cwd,omitempty"`
	EnvNames   []string `json:"envNames,omitempty"`
	Background bool     `json:"background,omitempty"`
	ExitCode   *int     `json:"exitCode,omitempty"`
	Signal     string   `json:"signal,omitempty"`
	TimedOut   bool     `json:"timedOut,omitempty"`
	DurationMS int64    `json:"durationMs,omitempty"`
	CPUTimeNs  int64    `json:"cpuTimeNs,omitempty"`
	MaxRSS     int64    `json:"maxRssBytes,omitempty"`
	Stdout     *Digest  `json:"stdout,omitempty"`
	Stderr     *Digest  `json:"stderr,omitempty"`
	// StdoutTruncated and StderrTruncated count the bytes of a stream
	// past what its blob keeps (the host's limit, or a disk that failed).
	StdoutTruncated int64 `json:"stdoutTruncated,omitempty"`
	StderrTruncated int64 `json:"stderrTruncated,omitempty"`
	// Error is why the command could not run.
	Error string `json:"error,omitempty"`
	// file_put, file_remove: the workspace path, and for a put the blob
	// of the bytes written.
	Path string  `json:"path,omitempty"`
	File *Digest `json:"file,omitempty"`
	Size int64   `json:"size,omitempty"`
	// file_move: the path moved to (Path is where it was).
	Destination string `json:"destination,omitempty"`
	// network: the sandbox's network.allow from then on, after a grant
	// or a revoke.
	Network []string `json:"network,omitempty"`
	// Decision is the policy decision that admitted the action, if one
	// was evaluated.
	Decision string `json:"decision,omitempty"`
}

// Blobs are the blobs an action names.
func (a Action) Blobs() map[string]Digest {
	out := map[string]Digest{}
	for name, d := range map[string]*Digest{"stdout": a.Stdout, "stderr": a.Stderr, "file": a.File} {
		if d != nil {
			out[name] = *d
		}
	}
	return out
}

// Workflow pins the workflow file. FileDigest is the sha256 of the file's
// exact bytes, and the blob store holds those bytes under that digest, so a
// rerun uses the very same file. CanonicalHash is workflow.Hash, converted
// with Digest(h): both are a sha256 spelled "sha256:<hex>". (The record does
// not import package workflow, so its format never moves with it.)
type Workflow struct {
	Name          string `json:"name"`
	FileDigest    Digest `json:"fileDigest"`
	CanonicalHash Digest `json:"canonicalHash"`
	// Lock is the blob of the flake.lock the steps' closures were built
	// with (every flake input pinned), when Nix realised any; a rerun
	// builds with the same pins.
	Lock *Digest `json:"lock,omitempty"`
}

// Policy mirrors the admission decision record of package policy.
type Policy struct {
	DecisionID   string   `json:"decisionId"`
	BundleDigest string   `json:"bundleDigest"`
	InputDigest  string   `json:"inputDigest"`
	Allowed      bool     `json:"allowed"`
	Deny         []string `json:"deny"`
	Warn         []string `json:"warn"`
	EvalTimeNs   int64    `json:"evalTimeNs"`
	// Cached is true when the decision was read from the policy decision
	// cache (policy.DecisionCache) instead of evaluated; EvalTimeNs is
	// then the lookup's.
	Cached bool `json:"cached,omitempty"`
	// DecisionLog is the blob of the run's decisions as OPA decision log
	// lines (policy.DecisionEvent), the admission first; nil in records
	// written before it existed.
	DecisionLog *Digest `json:"decisionLog,omitempty"`
}

// Host is what the run learned about the machine. The hostname is left out
// on purpose: records are shared (CI artefacts, bug reports), and the name
// of a machine is not needed to rerun on another.
type Host struct {
	Kernel     string `json:"kernel"`     // uname release, such as "6.1.0-18-amd64"
	Arch       string `json:"arch"`       // GOARCH, such as "amd64"
	CgroupMode string `json:"cgroupMode"` // "v1", "hybrid" or "v2"
	KVMUsable  bool   `json:"kvmUsable"`  // a guest booted under KVM (not just /dev/kvm opening)
	// KVMReason is why not, when KVMUsable is false and KVM was probed:
	// the probe's one-line answer for microvm.nix's CPU model, with qemu's
	// own last lines.
	KVMReason string `json:"kvmReason,omitempty"`
	Nix       string `json:"nix,omitempty"` // `nix --version` output; empty without Nix
}

// InputFormat says what an input's Digest is a hash of.
type InputFormat string

const (
	FormatFile InputFormat = "file" // sha256 of the file's bytes
	FormatNAR  InputFormat = "nar"  // NAR hash of a directory or a git tree (without .git)
)

// Input is one fetched workflow input. Digest is also the key of the blob
// holding the content (the file, or the NAR of the tree).
type Input struct {
	Name   string      `json:"name"`
	Kind   string      `json:"kind"` // file, git or http
	Source string      `json:"source"`
	Commit string      `json:"commit,omitempty"` // git only: the full commit checked out
	Format InputFormat `json:"format"`
	Digest Digest      `json:"digest"`
	Size   int64       `json:"size"` // bytes of the blob (file or NAR)
}

// Step is one step as it ran.
type Step struct {
	Name       string `json:"name"`
	Isolation  string `json:"isolation"`            // namespace or vm, never auto
	Hypervisor string `json:"hypervisor,omitempty"` // vm only
	Accel      string `json:"accel,omitempty"`      // vm only: kvm or tcg
	// AccelReason is why the VM ran with Accel (vm only): the KVM probe's
	// answer for the runner's own CPU model, the runner's build, or an
	// override.
	AccelReason string `json:"accelReason,omitempty"`

	// Closure lists the store paths the step ran on. Without Nix it is
	// empty and HostRoot fingerprints the host directories bound instead.
	Closure  []StorePath `json:"closure"`
	HostRoot *Digest     `json:"hostRoot,omitempty"`
	// Environment is the hash of the step's environment (packages,
	// hypervisor, vcpu, memory, network, shares; docs/nixgen.md), which
	// every step realised from the same NixOS system, runner or package
	// environment shares (with a flake of the user's own, the one whose
	// attribute was built). Absent without Nix and in older records.
	Environment *Digest `json:"environment,omitempty"`

	// Inputs maps each input the step received to its digest, taken
	// before the step started.
	Inputs map[string]Digest `json:"inputs"`
	// JobDigest is the sha256 of the job.json the agent ran; the blob store
	// holds those bytes.
	JobDigest Digest `json:"jobDigest"`
	// Seccomp is the digest of the seccomp filter the job ran under (the
	// sha256 of vmrunner/seccomp's canonical text of it); absent when the
	// backend does not report one (vm steps, older records).
	Seccomp *Digest `json:"seccomp,omitempty"`

	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Status   Status    `json:"status"`
	ExitCode int       `json:"exitCode"`         // -1 when killed by a signal or never started
	Signal   string    `json:"signal,omitempty"` // such as "SIGKILL"
	TimedOut bool      `json:"timedOut"`
	OOM      bool      `json:"oom"`
	// Detail says why a step failed without a result from the agent.
	Detail string `json:"detail,omitempty"`

	Usage   Usage    `json:"usage"`
	Logs    Logs     `json:"logs"`
	Outputs []Output `json:"outputs"`

	// Network is the step's egress; absent for a step without
	// network.allow (loopback only).
	Network *Network `json:"network,omitempty"`
}

// Network is what a step with egress was allowed and what it did: its
// rules as enforced, and the audit log of every connection, DNS query
// and the firewall's drops (docs/network.md).
type Network struct {
	// Allow is the step's network.allow; Deny the policy's forbidden
	// entries (data.agentsandbox.egress_deny) in force for it.
	Allow []string `json:"allow"`
	Deny  []string `json:"deny,omitempty"`
	// Bandwidth is the limit the proxy and tc enforced, bytes/s.
	Bandwidth int64 `json:"bandwidthBps"`
	// Log is the blob of the audit log, JSON lines (egress.ReadLog).
	Log Digest `json:"log"`
	// Counts summarise the log.
	Allowed  int   `json:"allowed"`
	Denied   int   `json:"denied"`
	Failed   int   `json:"failed"`
	Queries  int   `json:"queries"`
	NXDomain int   `json:"nxdomain"`
	Dropped  int64 `json:"droppedPackets"`
	BytesOut int64 `json:"bytesOut"`
	BytesIn  int64 `json:"bytesIn"`
}

// StorePath is one path of a step's closure.
type StorePath struct {
	Path    string  `json:"path"`
	NarHash NarHash `json:"narHash"`
	NarSize int64   `json:"narSize"`
}

// Usage is what the step's cgroup measured.
type Usage struct {
	PeakMemoryBytes int64 `json:"peakMemoryBytes"`
	CPUTimeNs       int64 `json:"cpuTimeNs"`
	PidsPeak        int64 `json:"pidsPeak"`
	OOMKills        int64 `json:"oomKills"`
	ThrottledNs     int64 `json:"throttledNs"`
}

// Logs are blob references to a step's output streams. A nil Console means
// the backend has no separate console (namespace).
//
// A stream longer than the host keeps is stored as its head, a marker line
// and its tail; the *Truncated fields count the bytes left out of its
// middle, and are absent when nothing was (docs/records.md).
type Logs struct {
	Stdout  Digest  `json:"stdout"`
	Stderr  Digest  `json:"stderr"`
	Console *Digest `json:"console,omitempty"`

	StdoutTruncated  int64 `json:"stdoutTruncated,omitempty"`
	StderrTruncated  int64 `json:"stderrTruncated,omitempty"`
	ConsoleTruncated int64 `json:"consoleTruncated,omitempty"`
}

// Output is one declared output, stored as a NAR. Its blob is
// NarHash.Blob(): the NAR hash is the sha256 of the NAR, which is the
// blob's key.
type Output struct {
	Path    string  `json:"path"` // workspace-relative, as declared
	NarHash NarHash `json:"narHash"`
	NarSize int64   `json:"narSize"`
}

// Duration is the run's wall time.
func (r *Record) Duration() time.Duration { return r.Finished.Sub(r.Started) }
