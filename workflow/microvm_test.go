package workflow

import (
	"strings"
	"testing"
)

// TestMicrovmPin: both forms parse to the same pin, and a workflow that does
// not set microvm keeps the hash it had before the key existed.
func TestMicrovmPin(t *testing.T) {
	const head = "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: m\nnixpkgs: github:NixOS/nixpkgs/8f3e1f807051e32d8c95cd12b9b421623850a34d\n"
	const steps = "steps:\n  - name: a\n    run: \"true\"\n"
	const rev = "71beea0076cd46dafcee97a5a2e7d00cbba5bd2f"
	parse := func(s string) *Workflow {
		t.Helper()
		w, err := Parse("m.yaml", []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	plain := parse(head + steps)
	if plain.Microvm != nil {
		t.Fatalf("Microvm = %+v without the key", plain.Microvm)
	}
	c, _ := plain.Canonical()
	if strings.Contains(string(c), "microvm") {
		t.Errorf("canonical form names microvm without the key: %s", c)
	}
	str := parse(head + "microvm: github:microvm-nix/microvm.nix/" + rev + "\n" + steps)
	if str.Microvm == nil || str.Microvm.Rev != rev || str.Microvm.Ref != "github:microvm-nix/microvm.nix/"+rev || str.Microvm.NarHash != "" {
		t.Fatalf("string form: %+v", str.Microvm)
	}
	m := parse(head + "microvm:\n  ref: github:microvm-nix/microvm.nix/" + rev + "\n  narHash: sha256-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n" + steps)
	if m.Microvm == nil || m.Microvm.Rev != rev || m.Microvm.NarHash != "sha256-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=" {
		t.Fatalf("mapping form: %+v", m.Microvm)
	}
	if plain.Hash() == str.Hash() || str.Hash() == m.Hash() {
		t.Error("a microvm pin does not change the hash")
	}
}
