package nixgen

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/agentsandbox/agentsandbox/microvm"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Environment is everything of a step that reaches its realised closure:
// the NixOS system, the microvm.nix runner and the package environment
// built for it. Steps with equal environments share one of each, whatever
// their names, scripts, env, needs, inputs, outputs, timeouts, pids,
// bandwidth, IO rates or isolation; those travel in job.json or are enforced
// by the host. Two environments are the same when their Hash is.
type Environment struct {
	// Packages are the step's nixpkgs attribute paths, sorted and unique
	// (the workflow package normalises them).
	Packages []string `json:"packages"`
	// Hypervisor is microvm.hypervisor.
	Hypervisor string `json:"hypervisor"`
	// VCPU is microvm.vcpu.
	VCPU int `json:"vcpu"`
	// MemMiB is microvm.mem: resources.memory in MiB rounded up, 2049 for
	// a qemu step asking for exactly 2048 (see MemMiB).
	MemMiB int `json:"memMiB"`
	// Shares is how the control directory and the workspace reach the
	// guest, which follows from the hypervisor: "9p" (qemu), "virtiofs"
	// (cloud-hypervisor) or "volumes" (firecracker).
	Shares string `json:"shares"`
	// WorkspaceMiB is the size of firecracker's workspace volume
	// (resources.disk, at least microvm.MinWorkspaceImageMiB); 0 with shares, where
	// the disk quota is the host's business.
	WorkspaceMiB int `json:"workspaceMiB,omitempty"`
	// Allow is the step's network.allow in the workflow's canonical
	// spelling: it becomes the guest's firewall. Empty: loopback only, no
	// interface.
	Allow []string `json:"allow"`
}

// Share kinds of Environment.Shares.
const (
	Shares9p       = "9p"
	SharesVirtiofs = "virtiofs"
	SharesVolumes  = "volumes"
)

// EnvHash identifies an Environment: the sha256 of a version tag and its
// JSON encoding.
type EnvHash [32]byte

// String is "sha256:" and 64 lowercase hex digits, the form records use.
func (h EnvHash) String() string { return "sha256:" + hex.EncodeToString(h[:]) }

// Name is the environment's name in the generated flake: "env-" and the
// first 16 hex digits of the hash. It is the attribute under
// nixosConfigurations, packages.<system>, stepEnvs and tcgRunners, and the
// file name envs/<name>.nix. Generate refuses two environments of one
// workflow with the same Name.
func (h EnvHash) Name() string { return "env-" + hex.EncodeToString(h[:8]) }

// MarshalText makes an EnvHash its String form in JSON.
func (h EnvHash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// ParseEnvHash parses the String form back.
func ParseEnvHash(s string) (EnvHash, error) {
	var h EnvHash
	rest, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(rest) != hex.EncodedLen(len(h)) || strings.ToLower(rest) != rest {
		return h, fmt.Errorf("parse environment hash %q: want sha256: and 64 lowercase hex digits", s)
	}
	if _, err := hex.Decode(h[:], []byte(rest)); err != nil {
		return h, fmt.Errorf("parse environment hash %q: %w", s, err)
	}
	return h, nil
}

// UnmarshalText parses the String form.
func (h *EnvHash) UnmarshalText(b []byte) error {
	p, err := ParseEnvHash(string(b))
	if err != nil {
		return err
	}
	*h = p
	return nil
}

// envHashTag versions the encoding: change it whenever the generated Nix of
// an environment changes meaning without the Environment changing.
const envHashTag = "agentsandbox/nixgen/environment/v1\x00"

// Hash is the environment's identity.
func (e Environment) Hash() EnvHash {
	e.Packages = nonNil(e.Packages)
	e.Allow = nonNil(e.Allow)
	b, err := json.Marshal(e)
	if err != nil { // strings and ints only
		panic(fmt.Sprintf("nixgen: encode environment: %v", err))
	}
	h := sha256.New()
	h.Write([]byte(envHashTag))
	h.Write(b)
	var d EnvHash
	h.Sum(d[:0])
	return d
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// EnvironmentOf returns step s's environment, or why nixgen cannot build
// one for it (an unsupported hypervisor, a quota below the minimum, a
// package or allow entry that is not well formed).
func EnvironmentOf(s *workflow.Step) (Environment, error) {
	var e Environment
	if s.Resources.VCPU < 1 {
		return e, fmt.Errorf("resources.vcpu is %d; want at least 1", s.Resources.VCPU)
	}
	if s.Resources.Memory < 1<<20 {
		return e, fmt.Errorf("resources.memory is %d bytes; want at least 1 MiB", s.Resources.Memory)
	}
	for _, p := range s.Packages {
		if _, err := attrPath("pkgs", p); err != nil {
			return e, err
		}
	}
	for _, a := range s.Network.Allow {
		if _, err := parseAllow(a); err != nil {
			return e, err
		}
	}
	e.Packages = slices.Clone(s.Packages)
	slices.Sort(e.Packages)
	e.Packages = slices.Compact(e.Packages)
	e.Allow = slices.Clone(s.Network.Allow)
	slices.Sort(e.Allow)
	e.Allow = slices.Compact(e.Allow)
	e.Hypervisor = string(s.Hypervisor)
	e.VCPU = s.Resources.VCPU
	e.MemMiB, _ = MemMiB(s.Resources.Memory, s.Hypervisor)
	switch s.Hypervisor {
	case workflow.HypervisorQEMU:
		e.Shares = Shares9p
	case workflow.HypervisorCloudHypervisor:
		e.Shares = SharesVirtiofs
	case workflow.HypervisorFirecracker:
		e.Shares = SharesVolumes
		e.WorkspaceMiB = int((s.Resources.Disk + 1<<20 - 1) >> 20)
		if e.WorkspaceMiB < microvm.MinWorkspaceImageMiB {
			e.WorkspaceMiB = microvm.MinWorkspaceImageMiB
		}
	default:
		return e, fmt.Errorf("hypervisor %q is not supported; use %q, %q or %q", s.Hypervisor,
			workflow.HypervisorQEMU, workflow.HypervisorCloudHypervisor, workflow.HypervisorFirecracker)
	}
	return e, nil
}

// EnvGroup is one distinct environment of a workflow and the steps that
// share it, in the workflow's order.
type EnvGroup struct {
	Hash        EnvHash
	Environment Environment
	Steps       []string
}

// Environments groups w's steps by environment, in the order each
// environment first appears among the steps.
func Environments(w *workflow.Workflow) ([]EnvGroup, error) {
	var out []EnvGroup
	index := map[EnvHash]int{}
	names := map[string]EnvHash{}
	for i := range w.Steps {
		s := &w.Steps[i]
		e, err := EnvironmentOf(s)
		if err != nil {
			return nil, fmt.Errorf("environment of step %q: %w", s.Name, err)
		}
		h := e.Hash()
		if j, ok := index[h]; ok {
			out[j].Steps = append(out[j].Steps, s.Name)
			continue
		}
		if other, ok := names[h.Name()]; ok {
			return nil, fmt.Errorf("environments %s and %s share the name %s; change one step's resources", h, other, h.Name())
		}
		names[h.Name()] = h
		index[h] = len(out)
		out = append(out, EnvGroup{Hash: h, Environment: e, Steps: []string{s.Name}})
	}
	return out, nil
}
