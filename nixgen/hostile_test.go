package nixgen

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// hostileWorkflow puts injection attempts into every user string that
// reaches the generated Nix (names of steps are DNS labels and refused
// otherwise; see TestGenerateErrors).
func hostileWorkflow() (*workflow.Workflow, Options) {
	w := sampleWorkflow()
	w.Name = `x"; evil = builtins.abort "name"; "${builtins.abort "n"}` + "\n''"
	w.Nixpkgs = &workflow.Nixpkgs{Ref: `path:/nonexistent?x="${builtins.abort "ref"}"\`, NarHash: `sha256-"${x}"`}
	w.Steps[0].Packages = []string{`${builtins.abort "pkg"}`, `a.";b=1;"`, `c\.d''`, "e\nf"}
	return w, Options{ProjectFlake: `github:x/y"; inputs.z.url = "${builtins.abort "flake"}`, System: "x86_64-linux"}
}

// TestHostileValuesEvaluate generates a flake from hostile values, parses
// it, and evaluates flake.nix and the step modules with stub inputs: every
// hostile string must come back exactly, and nothing may be interpolated
// (an interpolation would abort the evaluation).
func TestHostileValuesEvaluate(t *testing.T) {
	testtier.Nix(t)
	w, opts := hostileWorkflow()
	fs, err := Generate(w, opts)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := fs.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		nixParse(t, f.Path, filepath.Join(dir, f.Path))
	}

	// Stub pkgs: each package attribute path evaluates to its own name.
	stub := map[string]any{"bashInteractive": "bashInteractive", "coreutils": "coreutils"}
	for _, s := range w.Steps {
		for _, p := range s.Packages {
			m := stub
			segs := strings.Split(p, ".")
			for _, seg := range segs[:len(segs)-1] {
				if _, ok := m[seg].(map[string]any); !ok {
					m[seg] = map[string]any{}
				}
				m = m[seg].(map[string]any)
			}
			m[segs[len(segs)-1]] = p
		}
	}
	stubJSON, _ := json.Marshal(stub)
	if err := os.WriteFile(filepath.Join(dir, "stub.json"), stubJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := EnvironmentOf(&w.Steps[0])
	if err != nil {
		t.Fatal(err)
	}
	fetchEnv := e.Hash().Name()
	expr := `
let
  envName = "` + fetchEnv + `";
  pkgs = builtins.fromJSON (builtins.readFile ./stub.json);
  flake = import ./flake.nix;
  nixpkgs = {
    legacyPackages."x86_64-linux" = pkgs // { buildEnv = a: a; };
    lib = {
      nixosSystem = a: a // { config.microvm.declaredRunner = "runner"; };
      replaceString = null;
      versionAtLeast = v: min: builtins.compareVersions v min >= 0;
      trivial.release = "26.05";
    };
  };
  out = flake.outputs {
    self = out;
    inherit nixpkgs;
    microvm.nixosModules.microvm = "microvm";
    agentsandbox.nixosModules.guest = "guest";
  };
  env = import (./envs + "/${envName}.nix") { inherit pkgs; };
in {
  description = flake.description;
  inputs = flake.inputs;
  envs = builtins.mapAttrs (n: v: v.paths) out.legacyPackages."x86_64-linux".stepEnvs;
  runners = out.packages."x86_64-linux";
  modules = builtins.mapAttrs (n: v: builtins.length v.modules) out.nixosConfigurations;
  fetch = env.environment.systemPackages;
  guest = env.agentsandbox.guest.network.allow;
}
`
	if err := os.WriteFile(filepath.Join(dir, "check.nix"), []byte(expr), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("nix-instantiate", "--eval", "--strict", "--json", filepath.Join(dir, "check.nix")).CombinedOutput()
	if err != nil {
		t.Fatalf("evaluate the generated flake with stubs: %v\n%s", err, out)
	}
	var got struct {
		Description string
		Inputs      map[string]map[string]any
		Envs        map[string][]string
		Runners     map[string]string
		Modules     map[string]int
		Fetch       []string
		Guest       []map[string]any
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("decode %s: %v", out, err)
	}
	if want := "agentsandbox workflow " + w.Name; got.Description != want {
		t.Errorf("description = %q, want %q", got.Description, want)
	}
	if want := w.Nixpkgs.Ref + "&narHash=" + w.Nixpkgs.NarHash; got.Inputs["nixpkgs"]["url"] != want {
		t.Errorf("nixpkgs url = %q, want %q", got.Inputs["nixpkgs"]["url"], want)
	}
	if got.Inputs["agentsandbox"]["url"] != opts.ProjectFlake {
		t.Errorf("agentsandbox url = %q, want %q", got.Inputs["agentsandbox"]["url"], opts.ProjectFlake)
	}
	if len(got.Inputs) != 3 {
		t.Errorf("inputs = %v, want nixpkgs, microvm and agentsandbox only", got.Inputs)
	}
	if !reflect.DeepEqual(got.Fetch, w.Steps[0].Packages) {
		t.Errorf("systemPackages = %q, want %q", got.Fetch, w.Steps[0].Packages)
	}
	if want := append([]string{"bashInteractive", "coreutils"}, w.Steps[0].Packages...); !reflect.DeepEqual(got.Envs[fetchEnv], want) {
		t.Errorf("stepEnvs.fetch paths = %q, want %q", got.Envs[fetchEnv], want)
	}
	for _, s := range w.Steps {
		e, err := EnvironmentOf(&s)
		if err != nil {
			t.Fatal(err)
		}
		n := e.Hash().Name()
		if got.Runners[n] != "runner" || got.Modules[n] != 3 {
			t.Errorf("step %s: environment %s: runner %q, %d modules", s.Name, n, got.Runners[n], got.Modules[n])
		}
	}
	if len(got.Guest) != len(w.Steps[0].Network.Allow) {
		t.Errorf("allow = %v", got.Guest)
	}
}
