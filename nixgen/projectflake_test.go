package nixgen

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// TestProjectFlakeVendorHash recomputes the vendorHash of the project
// flake.nix (buildGoModule's hash of the `go mod vendor` tree) and fails
// with the commands to fix it when go.mod, go.sum or the imports changed.
// It lives here because nixgen owns the project's Nix files.
func TestProjectFlakeVendorHash(t *testing.T) {
	nix := testtier.Nix(t)
	goBin := testtier.Command(t, "nix", "go", "install Go")
	flake, err := os.ReadFile("../flake.nix")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*vendorHash = "(sha256-[A-Za-z0-9+/=]+)";`).FindSubmatch(flake)
	if m == nil {
		t.Fatal(`flake.nix has no line vendorHash = "sha256-...";`)
	}
	declared := string(m[1])
	vendor := filepath.Join(t.TempDir(), "vendor")
	cmd := exec.Command(goBin, "mod", "vendor", "-o", vendor)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go mod vendor: %v\n%s", err, out)
	}
	out, err := exec.Command(nix, "--extra-experimental-features", "nix-command", "hash", "path", vendor).CombinedOutput()
	if err != nil {
		t.Fatalf("nix hash path: %v\n%s", err, out)
	}
	actual := strings.TrimSpace(string(out))
	if actual != declared {
		t.Fatalf("flake.nix vendorHash is %s but the vendored modules hash to %s.\n"+
			"Update it (from the repository root):\n"+
			"  rm -rf /tmp/asb-vendor && go mod vendor -o /tmp/asb-vendor && nix --extra-experimental-features nix-command hash path /tmp/asb-vendor\n"+
			"and put the printed hash into flake.nix:  vendorHash = \"%s\";", declared, actual, actual)
	}
}
