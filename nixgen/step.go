package nixgen

import (
	"fmt"
	"strconv"

	"github.com/agentsandbox/agentsandbox/microvm"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// flakeData is what flake.nix.tmpl prints. Every string field is Nix text
// already (a literal from String, or a number).
type flakeData struct {
	Description string
	Nixpkgs     nixpkgsData
	Microvm     nixpkgsData
	// Check, when set, makes every NixOS system assert that nixpkgs is
	// new enough for the default microvm.nix.
	Check      *checkData
	ProjectURL string
	System     string
	Envs       []flakeStep
}

// checkData is the nixpkgs age check: MinRelease is compared with
// lib.trivial.release; Message is thrown, followed by that release.
type checkData struct {
	MinRelease, Message string
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
	Attr     string   // the environment's name (a checked "env-" + hex name)
	Module   string   // ./envs/<name>.nix
	Packages []string // pkgs."a"."b" selections
	// TCG is set for qemu environments, which also get a software-emulation runner.
	TCG bool
}

// stepData is what step.nix.tmpl prints; all fields are Nix text.
type stepData struct {
	Hypervisor string
	VCPU       string
	Mem        string
	MemBumped  bool
	Socket     string
	Shares     []shareData
	Volumes    []volumeData
	Tap        *tapData
	Packages   []string
	Control    string
	Workspace  string
	Allow      []allowData
	Address    string
	Gateway    string
	// SessionArgs is microvm.qemu.extraArgs (Nix strings): the session
	// channel, for qemu only.
	SessionArgs []string
	// Lean sets the options that keep the runner's closure small, which
	// exist at DefaultMicrovmRev (not necessarily at a workflow's own pin).
	Lean bool
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

// envFor renders one environment's module data and its flake entries. It
// reads nothing but the Environment, so steps with equal environments get
// byte-identical modules.
func envFor(h EnvHash, e Environment) (stepData, flakeStep, error) {
	var sd stepData
	var fs flakeStep
	pkgs := make([]string, 0, len(e.Packages))
	for _, p := range e.Packages {
		sel, err := attrPath("pkgs", p)
		if err != nil {
			return sd, fs, err
		}
		pkgs = append(pkgs, sel)
	}
	sd = stepData{
		Hypervisor: String(e.Hypervisor),
		VCPU:       strconv.Itoa(e.VCPU),
		Mem:        strconv.Itoa(e.MemMiB),
		MemBumped:  e.MemMiB == 2049 && e.Hypervisor == string(workflow.HypervisorQEMU),
		Socket:     String(microvm.ControlSocket),
		Packages:   pkgs,
		Control:    String(guestConstants.ControlMount),
		Workspace:  String(guestConstants.WorkspaceMount),
		Address:    String(GuestAddress),
		Gateway:    String(HostAddress),
	}
	if e.Hypervisor == string(workflow.HypervisorQEMU) {
		// microvm.nix's qemu runner uses PCI devices once a VM has
		// shares (lib/runners/qemu.nix: requirePci), and every qemu
		// environment has the two 9p shares.
		for _, a := range microvm.SessionQemuArgs("pci") {
			sd.SessionArgs = append(sd.SessionArgs, String(a))
		}
	}
	switch e.Shares {
	case Shares9p:
		sd.Shares = []shareData{
			share9p(guestConstants.ControlTag, microvm.ControlSource, guestConstants.ControlMount),
			share9p(guestConstants.WorkspaceTag, microvm.WorkspaceSource, guestConstants.WorkspaceMount),
		}
	case SharesVirtiofs:
		sd.Shares = []shareData{
			shareVirtiofs(guestConstants.ControlTag, microvm.ControlSource, guestConstants.ControlMount),
			shareVirtiofs(guestConstants.WorkspaceTag, microvm.WorkspaceSource, guestConstants.WorkspaceMount),
		}
	case SharesVolumes:
		sd.Volumes = []volumeData{
			{Image: String(microvm.ControlImage), MountPoint: String(guestConstants.ControlMount), Label: String(guestConstants.ControlTag), Size: strconv.Itoa(microvm.ControlImageMiB)},
			{Image: String(microvm.WorkspaceImage), MountPoint: String(guestConstants.WorkspaceMount), Label: String(guestConstants.WorkspaceTag), Size: strconv.Itoa(e.WorkspaceMiB)},
		}
	default:
		return sd, fs, fmt.Errorf("environment %s: shares %q are not %q, %q or %q", h.Name(), e.Shares, Shares9p, SharesVirtiofs, SharesVolumes)
	}
	if len(e.Allow) > 0 {
		sd.Tap = &tapData{ID: String(microvm.TapID), MAC: String(microvm.GuestMAC)}
		for _, a := range e.Allow {
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
		Attr:     String(h.Name()),
		Module:   "./envs/" + h.Name() + ".nix",
		Packages: pkgs,
		TCG:      e.Hypervisor == string(workflow.HypervisorQEMU),
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
