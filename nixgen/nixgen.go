package nixgen

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"text/template"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/templates"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Defaults for Options.
const (
	DefaultProjectFlake = "github:agentsandbox/agentsandbox"
	DefaultSystem       = "x86_64-linux"
)

// Guest network addressing on the step's tap link, inside the step's own
// network namespace (so every step can use the same addresses): the
// egress room's (package egress). The netns code gives the tap
// HostAddress; the guest takes GuestAddress and routes through
// HostAddress, which also answers DNS (the step's resolver).
var (
	HostAddress  = egress.Gateway.String()
	GuestAddress = netip.PrefixFrom(egress.Guest, egress.GatewayPrefix.Bits()).String()
)

// Options tune Generate. The zero value uses the defaults.
type Options struct {
	// ProjectFlake is the flake reference of this project, which provides
	// nixosModules.guest and the guest agent. Default DefaultProjectFlake.
	ProjectFlake string
	// System is the Nix system the VMs and environments are built for.
	// Default DefaultSystem.
	System string
}

func (o Options) withDefaults() Options {
	if o.ProjectFlake == "" {
		o.ProjectFlake = DefaultProjectFlake
	}
	if o.System == "" {
		o.System = DefaultSystem
	}
	return o
}

// RunnerAttr is the flake attribute of an environment's microvm.nix runner
// (config.microvm.declaredRunner): packages.<system>.<env>, where <env> is
// h.Name(). Every step of that environment runs on it.
func (o Options) RunnerAttr(h EnvHash) string {
	return "packages." + o.withDefaults().System + "." + h.Name()
}

// EnvAttr is the flake attribute of an environment's package environment (a
// buildEnv of its packages) for the namespace backend:
// legacyPackages.<system>.stepEnvs.<env>. It lives under legacyPackages so
// it is apart from the runners.
func (o Options) EnvAttr(h EnvHash) string {
	return "legacyPackages." + o.withDefaults().System + ".stepEnvs." + h.Name()
}

// TCGRunnerAttr is the flake attribute of a qemu environment's runner under
// software emulation, for hosts where KVM does not work:
// legacyPackages.<system>.tcgRunners.<env>.
func (o Options) TCGRunnerAttr(h EnvHash) string {
	return "legacyPackages." + o.withDefaults().System + ".tcgRunners." + h.Name()
}

// ConfigAttr is the flake attribute of an environment's NixOS
// configuration: nixosConfigurations.<env>.
func ConfigAttr(h EnvHash) string { return "nixosConfigurations." + h.Name() }

// ErrNoNixpkgs is returned by Generate for a workflow that pins no nixpkgs:
// there is nothing for Nix to build, and its steps run in the namespace
// backend on the host's own tools.
var ErrNoNixpkgs = errors.New("workflow pins no nixpkgs, so it has no flake to generate; add a nixpkgs: pin to use Nix")

// stepNameRE is a DNS label; names also become file names and flake
// attributes, so Generate checks them again.
var stepNameRE = lazyRegexp(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Generate renders the flake for w. The result is deterministic: the same
// workflow and options give byte-identical files.
func Generate(w *workflow.Workflow, opts Options) (Files, error) {
	opts = opts.withDefaults()
	if w == nil {
		return nil, errors.New("generate nix: no workflow")
	}
	if w.Nixpkgs == nil {
		return nil, fmt.Errorf("generate nix for workflow %q: %w", w.Name, ErrNoNixpkgs)
	}
	if len(w.Steps) == 0 {
		return nil, fmt.Errorf("generate nix for workflow %q: it has no steps", w.Name)
	}
	mv, mvDefault := microvmPin(w)
	for _, c := range []struct{ what, v string }{
		{"workflow name", w.Name}, {"nixpkgs ref", w.Nixpkgs.Ref}, {"nixpkgs narHash", w.Nixpkgs.NarHash},
		{"microvm ref", mv.Ref}, {"microvm narHash", mv.NarHash},
		{"project flake", opts.ProjectFlake}, {"system", opts.System},
	} {
		if err := CheckString(c.what, c.v); err != nil {
			return nil, fmt.Errorf("generate nix: %w", err)
		}
	}
	fd := flakeData{
		Description: String("agentsandbox workflow " + w.Name),
		Nixpkgs:     nixpkgsInput(w.Nixpkgs),
		Microvm:     flakeInput(mv.Ref, mv.NarHash),
		ProjectURL:  String(opts.ProjectFlake),
		System:      String(opts.System),
	}
	if mvDefault {
		fd.Check = &checkData{
			MinRelease: String(MinNixpkgsRelease),
			Message: String(fmt.Sprintf("agentsandbox: nixpkgs %s is too old for microvm.nix %s, agentsandbox's default, which needs nixpkgs %s or later (lib.replaceString). "+
				"Pin a newer nixpkgs in the workflow (nixpkgs: github:NixOS/nixpkgs/<commit of nixos-%s or later>), "+
				"or pin a microvm.nix revision that supports this nixpkgs (microvm: github:microvm-nix/microvm.nix/<commit>). This nixpkgs is release ",
				w.Nixpkgs.Ref, DefaultMicrovmRev[:12], MinNixpkgsRelease, MinNixpkgsRelease)),
		}
	}
	seen := map[string]bool{}
	for i := range w.Steps {
		s := &w.Steps[i]
		if !stepNameRE().MatchString(s.Name) {
			return nil, fmt.Errorf("generate nix: step name %q is not a DNS label (lowercase letters, digits, '-')", s.Name)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("generate nix: step %q appears twice", s.Name)
		}
		seen[s.Name] = true
	}
	groups, err := Environments(w)
	if err != nil {
		return nil, fmt.Errorf("generate nix: %w", err)
	}
	files := make(Files, 1, len(groups)+2)
	files[0].Path = "flake.nix"
	for _, g := range groups {
		sd, fs, err := envFor(g.Hash, g.Environment)
		if err != nil {
			return nil, fmt.Errorf("generate nix for step %q: %w", g.Steps[0], err)
		}
		sd.Lean = mvDefault
		fd.Envs = append(fd.Envs, fs)
		b, err := render("env.nix.tmpl", sd)
		if err != nil {
			return nil, err
		}
		files = append(files, File{Path: "envs/" + g.Hash.Name() + ".nix", Data: b})
	}
	b, err := render("flake.nix.tmpl", fd)
	if err != nil {
		return nil, err
	}
	files[0].Data = b
	tcg, err := render("tcg.nix.tmpl", struct{ Lean bool }{mvDefault})
	if err != nil {
		return nil, err
	}
	files = append(files, File{Path: "tcg.nix", Data: tcg})
	return files, nil
}

// MicrovmFlake is microvm.nix's repository as a flake reference; the
// generated flake pins it to the workflow's microvm: revision, or to
// DefaultMicrovmRev.
const MicrovmFlake = "github:microvm-nix/microvm.nix"

// DefaultMicrovmRev is the microvm.nix revision a workflow without a
// microvm: pin is built with: the one this project's generated modules are
// checked against (scripts/check-microvm-options.sh, 2026-08-09). It needs
// nixpkgs 25.11 or later (it calls lib.replaceString, which nixpkgs added
// on 2025-05-27; its CI builds release-26.05 and nixos-unstable), which the
// generated flake asserts (MinNixpkgsRelease).
const DefaultMicrovmRev = "71beea0076cd46dafcee97a5a2e7d00cbba5bd2f"

// MinNixpkgsRelease is the oldest nixpkgs release (lib.trivial.release)
// DefaultMicrovmRev evaluates with.
const MinNixpkgsRelease = "25.11"

// microvmPin is the microvm.nix pin of w: its own, or the default.
func microvmPin(w *workflow.Workflow) (pin workflow.Microvm, isDefault bool) {
	if w.Microvm != nil {
		return *w.Microvm, false
	}
	return workflow.Microvm{Ref: MicrovmFlake + "/" + DefaultMicrovmRev, Rev: DefaultMicrovmRev}, true
}

// githubRefRE matches the usual nixpkgs pin, github:OWNER/REPO/COMMIT.
var githubRefRE = lazyRegexp(`^github:([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)/([0-9a-f]{40})$`)

// flakeInput renders a pinned input (nixpkgs or microvm.nix).
func flakeInput(ref, narHash string) nixpkgsData {
	return nixpkgsInput(&workflow.Nixpkgs{Ref: ref, NarHash: narHash})
}

// nixpkgsInput renders the nixpkgs input. With a narHash and a github ref it
// is the attribute form { type = "github"; ...; narHash = ...; }, which
// every flakes-capable Nix verifies (Nix before 2.2x ignores a narHash
// query parameter on github: URLs). Other refs with a narHash get it as a
// query parameter, which current Nix accepts for every input type.
func nixpkgsInput(n *workflow.Nixpkgs) nixpkgsData {
	if n.NarHash == "" {
		return nixpkgsData{URL: String(n.Ref)}
	}
	if m := githubRefRE().FindStringSubmatch(n.Ref); m != nil {
		return nixpkgsData{GitHub: &githubData{
			Owner: String(m[1]), Repo: String(m[2]), Rev: String(m[3]), NarHash: String(n.NarHash),
		}}
	}
	sep := "?"
	if strings.Contains(n.Ref, "?") {
		sep = "&"
	}
	return nixpkgsData{URL: String(n.Ref + sep + "narHash=" + n.NarHash)}
}

// MemMiB converts a memory quota in bytes to microvm.mem, in MiB rounded up.
// Exactly 2048 MiB is known to hang qemu (microvm.nix), so with qemu it
// becomes 2049.
func MemMiB(memory int64, hv workflow.Hypervisor) (mib int, bumped bool) {
	const m = 1 << 20
	mib = int((memory + m - 1) / m)
	if mib == 2048 && hv == workflow.HypervisorQEMU {
		return 2049, true
	}
	return mib, false
}

func render(name string, data any) ([]byte, error) {
	var buf bytes.Buffer
	if err := tmpl().ExecuteTemplate(&buf, name, data); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	return buf.Bytes(), nil
}

// tmpl is parsed on first use, not at every start of the CLI.
var tmpl = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("nixgen").Option("missingkey=error").ParseFS(templates.FS, "*.tmpl"))
})

// guestConstants are the guest protocol's mount points and tags.
var guestConstants = struct{ ControlTag, WorkspaceTag, ControlMount, WorkspaceMount string }{
	guest.ControlTag, guest.WorkspaceTag, guest.ControlMount, guest.WorkspaceMount,
}
