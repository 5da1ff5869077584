package nixgen

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMicrovmModuleSystem runs scripts/check-microvm-options.sh: every
// generated environment module (of the examples and the sample workflow,
// alone and with tcg.nix) evaluates with microvm.nix's real option
// declarations and assertions under nixpkgs' module system, with no
// undeclared option, no ill-typed value and no failed assertion; and a
// module with an undeclared option is caught.
//
// It is an optional developer check, not a test tier: it needs checkouts
// (or bare git mirrors) of microvm.nix and of nixpkgs or nixpkgs.lib,
// which CI cannot fetch, named by AGENTSANDBOX_MICROVM_SRC and
// AGENTSANDBOX_NIXPKGS_LIB. Without them it skips, saying so.
func TestMicrovmModuleSystem(t *testing.T) {
	mv, nl := os.Getenv("AGENTSANDBOX_MICROVM_SRC"), os.Getenv("AGENTSANDBOX_NIXPKGS_LIB")
	if mv == "" || nl == "" {
		t.Skip("optional check: set AGENTSANDBOX_MICROVM_SRC to a microvm.nix checkout (revision " + DefaultMicrovmRev[:12] + ") and AGENTSANDBOX_NIXPKGS_LIB to a nixpkgs or nixpkgs.lib checkout")
	}
	if _, err := exec.LookPath("nix-instantiate"); err != nil {
		t.Skip("optional check: nix-instantiate is not installed (Debian: apt-get install nix-bin)")
	}
	script, err := filepath.Abs("../scripts/check-microvm-options.sh")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	var dirs []string
	for name, w := range examples(t) {
		fs, err := Generate(w, Options{})
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(root, name)
		if err := fs.WriteDir(dir); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
	}
	out, err := exec.Command(script, append([]string{mv, nl}, dirs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("check-microvm-options.sh: %v\n%s", err, out)
	}
	for _, d := range dirs {
		if !strings.Contains(string(out), `"`+filepath.Base(d)+`":{"env-`) {
			t.Errorf("the check's result does not list %s:\n%s", filepath.Base(d), out)
		}
	}

	bad := filepath.Join(root, "bad")
	if err := os.MkdirAll(filepath.Join(bad, "envs"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(bad, "tcg.nix"), []byte("{ }\n"), 0o644)
	os.WriteFile(filepath.Join(bad, "envs", "env-0.nix"), []byte("{ ... }: { microvm.notAnOption = 1; }\n"), 0o644)
	out, err = exec.Command(script, mv, nl, bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "The option `microvm.notAnOption' does not exist") {
		t.Errorf("an undeclared option passed the check: %v\n%s", err, out)
	}
}
