package nixgen

import (
	"fmt"
	"strconv"

	"github.com/agentsandbox/agentsandbox/workflow"
)

// flakeData is what flake.nix.tmpl prints. Every string field is Nix text
// already (a literal from String, or a number).
type flakeData struct {
	Description string
	Nixpkgs     nixpkgsData
	MicrovmURL  string
	ProjectURL  string
	System      string
	Steps       []flakeStep
}

// nixpkgsData is the nixpkgs input: URL, or GitHub in attribute form.
type nixpkgsData struct {
	URL    string
	GitHub *githubData
}

type githubData struct {
	Owner, Repo, Rev, NarHash string
}

type flakeStep struct {
	Attr     string   // the step name as a Nix string literal
	Module   string   // ./steps/<step>.nix (the name is a checked DNS label)
	EnvName  string   // literal: the buildEnv's name
	Packages []string // pkgs."a"."b" selections
	// TCG is set for qemu steps, which also get a software-emulation runner.
	TCG bool
}

// stepData is what step.nix.tmpl prints; all fields are Nix text.
type stepData struct {
	HostName   string
	Hypervisor string
	VCPU       string
	Mem        string
	MemBumped  bool
	Socket     string
	Shares     []shareData
	Volumes    []volumeData
	Tap        *tapData
	Packages   []string
	Step       string
	Control    string
	Workspace  string
	Allow      []allowData
	Address    string
	Gateway    string
}

type shareData struct {
	Proto, Tag, Source, MountPoint, SecurityModel, Socket string // Socket "" for 9p
}

type volumeData struct {
	Image, MountPoint, Label, Size string
}

type tapData struct {
	ID, MAC string
}

type allowData struct {
	Host, CIDR, Port string // Host or CIDR is "null"; Port "null" for any
}

// stepFor renders one step's module data and its flake entries.
func stepFor(workflowName string, s *workflow.Step) (stepData, flakeStep, error) {
	var sd stepData
	var fs flakeStep
	if s.Resources.VCPU < 1 {
		return sd, fs, fmt.Errorf("resources.vcpu is %d; want at least 1", s.Resources.VCPU)
	}
	if s.Resources.Memory < 1<<20 {
		return sd, fs, fmt.Errorf("resources.memory is %d bytes; want at least 1 MiB", s.Resources.Memory)
	}
	mem, bumped := MemMiB(s.Resources.Memory, s.Hypervisor)
	pkgs := make([]string, 0, len(s.Packages))
	for _, p := range s.Packages {
		sel, err := attrPath("pkgs", p)
		if err != nil {
			return sd, fs, err
		}
		pkgs = append(pkgs, sel)
	}
	sd = stepData{
		HostName:   String(s.Name),
		Hypervisor: String(string(s.Hypervisor)),
		VCPU:       strconv.Itoa(s.Resources.VCPU),
		Mem:        strconv.Itoa(mem),
		MemBumped:  bumped,
		Socket:     String(ControlSocket),
		Packages:   pkgs,
		Step:       String(s.Name),
		Control:    String(guestConstants.ControlMount),
		Workspace:  String(guestConstants.WorkspaceMount),
		Address:    String(GuestAddress),
		Gateway:    String(HostAddress),
	}
	switch s.Hypervisor {
	case workflow.HypervisorQEMU:
		sd.Shares = []shareData{
			share9p(guestConstants.ControlTag, ControlSource, guestConstants.ControlMount),
			share9p(guestConstants.WorkspaceTag, WorkspaceSource, guestConstants.WorkspaceMount),
		}
	case workflow.HypervisorCloudHypervisor:
		sd.Shares = []shareData{
			shareVirtiofs(guestConstants.ControlTag, ControlSource, guestConstants.ControlMount),
			shareVirtiofs(guestConstants.WorkspaceTag, WorkspaceSource, guestConstants.WorkspaceMount),
		}
	case workflow.HypervisorFirecracker:
		ws := int((s.Resources.Disk + 1<<20 - 1) >> 20)
		if ws < MinWorkspaceImageMiB {
			ws = MinWorkspaceImageMiB
		}
		sd.Volumes = []volumeData{
			{Image: String(ControlImage), MountPoint: String(guestConstants.ControlMount), Label: String(guestConstants.ControlTag), Size: strconv.Itoa(ControlImageMiB)},
			{Image: String(WorkspaceImage), MountPoint: String(guestConstants.WorkspaceMount), Label: String(guestConstants.WorkspaceTag), Size: strconv.Itoa(ws)},
		}
	default:
		return sd, fs, fmt.Errorf("hypervisor %q is not supported; use %q, %q or %q", s.Hypervisor,
			workflow.HypervisorQEMU, workflow.HypervisorCloudHypervisor, workflow.HypervisorFirecracker)
	}
	if s.Network.HasEgress() {
		sd.Tap = &tapData{ID: String(TapID(workflowName, s.Name)), MAC: String(MAC(workflowName, s.Name))}
		for _, a := range s.Network.Allow {
			r, err := parseAllow(a)
			if err != nil {
				return sd, fs, err
			}
			ad := allowData{Host: "null", CIDR: "null", Port: "null"}
			if r.Host != "" {
				ad.Host = String(r.Host)
			} else {
				ad.CIDR = String(r.CIDR)
			}
			if r.Port != 0 {
				ad.Port = strconv.Itoa(r.Port)
			}
			sd.Allow = append(sd.Allow, ad)
		}
	}
	fs = flakeStep{
		Attr:     String(s.Name),
		Module:   "./steps/" + s.Name + ".nix",
		EnvName:  String("agentsandbox-env-" + s.Name),
		Packages: pkgs,
		TCG:      s.Hypervisor == workflow.HypervisorQEMU,
	}
	return sd, fs, nil
}

// ShareSecurityModel is the 9p security model of both shares: files the
// guest creates belong to the user running the hypervisor on the host, and
// ownership changes in the guest are not stored. The host needs no xattrs to
// read outputs, and qemu needs no root.
const ShareSecurityModel = "none"

func share9p(tag, source, mount string) shareData {
	return shareData{Proto: String("9p"), Tag: String(tag), Source: String(source), MountPoint: String(mount),
		SecurityModel: String(ShareSecurityModel)}
}

// VirtiofsSocket is the virtiofsd socket of a share, relative to the VM's
// working directory; bin/virtiofsd-run creates it.
func VirtiofsSocket(tag string) string { return tag + ".virtiofs.sock" }

func shareVirtiofs(tag, source, mount string) shareData {
	return shareData{Proto: String("virtiofs"), Tag: String(tag), Source: String(source), MountPoint: String(mount),
		Socket: String(VirtiofsSocket(tag))}
}
