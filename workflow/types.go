package workflow

// The v1 data model. Parse fills these types from YAML, applies defaults
// (see defaults.go), and Canonical encodes them as the workflow's identity.
// JSON field names are the canonical form's keys: renaming one changes every
// workflow hash, so treat them as a compatibility promise.

// APIVersion and Kind are the only header values v1 accepts.
const (
	APIVersion = "agentsandbox.dev/v1"
	Kind       = "Workflow"
)

// Workflow is a parsed, defaulted workflow.
type Workflow struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	// Nixpkgs is nil when the workflow pins no nixpkgs; then no step may
	// list packages or ask for vm isolation.
	Nixpkgs *Nixpkgs `json:"nixpkgs,omitempty"`
	// Microvm pins microvm.nix; nil means nixgen's default revision
	// (nixgen.DefaultMicrovmRev). Left out of the canonical form when nil,
	// so workflows without it keep their hashes.
	Microvm *Microvm `json:"microvm,omitempty"`
	// Inputs are sorted by name.
	Inputs []Input `json:"inputs"`
	// Steps keep their file order; Canonical sorts them by name.
	Steps []Step `json:"steps"`
}

// Nixpkgs pins the package set. Ref is a flake reference whose revision is a
// full 40-hex commit, such as "github:NixOS/nixpkgs/<commit>".
type Nixpkgs struct {
	Ref     string `json:"ref"`
	Rev     string `json:"rev"`               // the 40-hex commit taken from Ref
	NarHash string `json:"narHash,omitempty"` // SRI form, "sha256-..."
}

// Microvm pins microvm.nix the way Nixpkgs pins nixpkgs: Ref is a flake
// reference whose revision is a full 40-hex commit, such as
// "github:microvm-nix/microvm.nix/<commit>".
type Microvm struct {
	Ref     string `json:"ref"`
	Rev     string `json:"rev"`               // the 40-hex commit taken from Ref
	NarHash string `json:"narHash,omitempty"` // SRI form, "sha256-..."
}

// InputKind says which fetcher an input's source needs.
type InputKind string

const (
	InputFile InputKind = "file" // a local path, relative to the workflow file
	InputGit  InputKind = "git"  // a git:: URL pinned by Commit
	InputHTTP InputKind = "http" // an http(s) URL pinned by SHA256
)

// Input is one entry of the top-level inputs map.
type Input struct {
	Name   string    `json:"name"`
	Kind   InputKind `json:"kind"`
	Source string    `json:"source"`           // file: a clean path relative to the workflow file's directory (may start with ..)
	SHA256 string    `json:"sha256,omitempty"` // lowercase hex; files and archives
	Commit string    `json:"commit,omitempty"` // full 40-hex commit; git
	Dest   string    `json:"dest"`             // workspace-relative; defaults to Name
}

// Isolation is how a step is separated from the host.
type Isolation string

const (
	IsolationAuto      Isolation = "auto"
	IsolationVM        Isolation = "vm"
	IsolationNamespace Isolation = "namespace"
)

// Hypervisor names a microvm.nix hypervisor the runner supports.
type Hypervisor string

const (
	HypervisorQEMU            Hypervisor = "qemu"
	HypervisorCloudHypervisor Hypervisor = "cloud-hypervisor"
	HypervisorFirecracker     Hypervisor = "firecracker"
)

// Step is one job of the DAG, after defaults are applied.
type Step struct {
	Name       string            `json:"name"`
	Run        string            `json:"run"`
	Packages   []string          `json:"packages"` // nixpkgs attribute paths, sorted, unique
	Env        map[string]string `json:"env"`
	Needs      []string          `json:"needs"`   // sorted, unique
	Inputs     []string          `json:"inputs"`  // names of top-level inputs, sorted, unique
	Outputs    []string          `json:"outputs"` // clean workspace-relative paths, sorted, unique
	Resources  Resources         `json:"resources"`
	Network    Network           `json:"network"`
	Isolation  Isolation         `json:"isolation"`
	Hypervisor Hypervisor        `json:"hypervisor"`
	// Deterministic says a rerun of a record (agentsandbox rerun) must
	// reproduce the step: the same status and exit code, and outputs
	// with the same NAR hash: every output, or only DeterministicOutputs
	// when the step lists them (deterministic: [a.txt]). Both are left
	// out of the canonical form when unset, so workflows without them
	// keep their hashes.
	Deterministic bool `json:"deterministic,omitempty"`
	// DeterministicOutputs are the outputs the list form names: sorted,
	// unique, each one of Outputs. Empty means every output.
	DeterministicOutputs []string `json:"deterministicOutputs,omitempty"`
}

// OutputDeterministic reports whether a rerun must reproduce the step's
// output out (a path of Outputs) bit for bit.
func (s Step) OutputDeterministic(out string) bool {
	if !s.Deterministic {
		return false
	}
	if len(s.DeterministicOutputs) == 0 {
		return true
	}
	for _, o := range s.DeterministicOutputs {
		if o == out {
			return true
		}
	}
	return false
}

// Resources are a step's hard quotas. Sizes are bytes, network rates bits
// per second, disk IO rates bytes per second, durations milliseconds, so the
// canonical form has one spelling. The IO rates are left out of the
// canonical form when unlimited, and the inode budget when derived from the
// disk, so workflows that set none keep the hashes they had before the
// fields existed.
type Resources struct {
	VCPU      int   `json:"vcpu"`
	Memory    int64 `json:"memory"`    // bytes
	PIDs      int   `json:"pids"`      // processes and threads
	Disk      int64 `json:"disk"`      // bytes of the workspace, and of scratch space (/tmp)
	TimeoutMS int64 `json:"timeoutMs"` // 0: no timeout declared
	Bandwidth int64 `json:"bandwidth"` // bits per second; 0: unlimited
	// IOReadBps and IOWriteBps throttle reads from and writes to the block
	// device holding the step's workspace, in bytes per second; 0: unlimited.
	IOReadBps  int64 `json:"ioReadBps,omitempty"`
	IOWriteBps int64 `json:"ioWriteBps,omitempty"`
	// DiskInodes is the workspace's inode budget (files, directories,
	// symlinks); 0: derived from Disk (one per 16 KiB, at least 1024).
	DiskInodes int64 `json:"diskInodes,omitempty"`
}

// Network is a step's egress. An empty Allow means loopback only.
// Entries are "*", "host", "host:port", "*.domain[:port]", "IP", "CIDR",
// "IPv4:port", "CIDR:port", "[IPv6]:port" or "[IPv6/len]:port", ports
// 1-65535, in canonical spelling (host names lowercase, IPs and prefixes as
// net/netip prints them); sorted, unique. Parse checks the form only;
// policy decides what is allowed.
type Network struct {
	Allow []string `json:"allow"`
}

// HasEgress reports whether the step asks for any network beyond loopback.
func (n Network) HasEgress() bool { return len(n.Allow) > 0 }
