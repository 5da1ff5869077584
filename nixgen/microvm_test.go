package nixgen

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// TestMicrovmInput: the default pin, a workflow's own pin (attribute form
// with its narHash), and the nixpkgs age check only with the default.
func TestMicrovmInput(t *testing.T) {
	w := sampleWorkflow()
	fs, err := Generate(w, Options{})
	if err != nil {
		t.Fatal(err)
	}
	flake, _ := fs.Get("flake.nix")
	for _, want := range []string{
		`url = "github:microvm-nix/microvm.nix/` + DefaultMicrovmRev + `";`,
		`lib.versionAtLeast (lib.trivial.release or "0") "` + MinNixpkgsRelease + `"`,
		"assert nixpkgsOk || throw",
	} {
		if !strings.Contains(string(flake), want) {
			t.Errorf("default flake.nix lacks %q", want)
		}
	}
	const rev = "0000000000000000000000000000000000000001"
	w.Microvm = &workflow.Microvm{Ref: "github:microvm-nix/microvm.nix/" + rev, Rev: rev, NarHash: "sha256-BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB="}
	fs, err = Generate(w, Options{})
	if err != nil {
		t.Fatal(err)
	}
	flake, _ = fs.Get("flake.nix")
	for _, want := range []string{
		"    microvm = {\n      type = \"github\";\n      owner = \"microvm-nix\";\n      repo = \"microvm.nix\";\n      rev = \"" + rev + "\";\n      narHash = \"sha256-BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB=\";\n      inputs.nixpkgs.follows = \"nixpkgs\";\n    };",
	} {
		if !strings.Contains(string(flake), want) {
			t.Errorf("pinned flake.nix lacks %q:\n%s", want, flake)
		}
	}
	if strings.Contains(string(flake), "nixpkgsOk") || strings.Contains(string(flake), DefaultMicrovmRev) {
		t.Error("a workflow's own microvm pin still gets the default's check or revision")
	}
	// Options of the default revision are not assumed at another one.
	for _, f := range fs[1:] {
		if strings.Contains(string(f.Data), "registerClosure") || strings.Contains(string(f.Data), "qemu.package") {
			t.Errorf("%s sets an option only the default microvm.nix is known to have", f.Path)
		}
	}
}

// TestNixpkgsAgeCheck evaluates the generated flake.nix with real Nix and
// stub inputs: a nixpkgs lib without lib.replaceString, or of a release
// before MinNixpkgsRelease, is refused with the message naming both pins
// and what to do, when a NixOS system is evaluated; package environments
// still evaluate; a new enough lib passes.
func TestNixpkgsAgeCheck(t *testing.T) {
	testtier.Nix(t)
	w := sampleWorkflow()
	fs, err := Generate(w, Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := fs.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	eval := func(name, libAttrs, what string) (string, error) {
		expr := `
let
  flake = import ./flake.nix;
  pkgs = { bashInteractive = "b"; coreutils = "c"; cacert = "x"; curl = "y"; python3 = "p"; python3Packages.numpy = "n"; buildEnv = a: a.name; };
  nixpkgs = {
    legacyPackages."x86_64-linux" = pkgs;
    lib = { nixosSystem = a: { config.microvm.declaredRunner = "runner"; }; versionAtLeast = v: min: builtins.compareVersions v min >= 0; } // ` + libAttrs + `;
  };
  out = flake.outputs { self = out; inherit nixpkgs; microvm.nixosModules.microvm = "m"; agentsandbox.nixosModules.guest = "g"; };
in ` + what + "\n"
		p := filepath.Join(dir, name+".nix")
		if err := os.WriteFile(p, []byte(expr), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("nix-instantiate", "--eval", "--strict", p).CombinedOutput()
		return string(out), err
	}
	systems := `builtins.mapAttrs (n: v: v.config.microvm.declaredRunner) out.nixosConfigurations`
	envs := `builtins.attrValues out.legacyPackages."x86_64-linux".stepEnvs`
	for _, c := range []struct {
		name, lib string
		ok        bool
	}{
		{"old", `{ trivial.release = "24.11"; }`, false},
		{"release-without-replaceString", `{ trivial.release = "25.11"; }`, false},
		{"replaceString-but-old-release", `{ trivial.release = "25.05"; replaceString = 1; }`, false},
		{"new", `{ trivial.release = "25.11"; replaceString = 1; }`, true},
		{"newer", `{ trivial.release = "26.05"; replaceString = 1; }`, true},
	} {
		out, err := eval(c.name, c.lib, systems)
		if c.ok != (err == nil) {
			t.Errorf("%s: systems evaluate = %v, want %v:\n%s", c.name, err == nil, c.ok, out)
		}
		if !c.ok {
			for _, want := range []string{"error: agentsandbox: nixpkgs " + w.Nixpkgs.Ref + " is too old for microvm.nix " + DefaultMicrovmRev[:12],
				"needs nixpkgs 25.11 or later", "Pin a newer nixpkgs", "microvm: github:microvm-nix/microvm.nix/<commit>", "This nixpkgs is release "} {
				if !strings.Contains(out, want) {
					t.Errorf("%s: message lacks %q:\n%s", c.name, want, out)
				}
			}
		}
		if out, err := eval(c.name+"-envs", c.lib, envs); err != nil {
			t.Errorf("%s: package environments do not evaluate: %v\n%s", c.name, err, out)
		}
	}
}
