package testtier

import (
	"testing"

	"github.com/agentsandbox/agentsandbox/nixgen"
)

// TestMinNixVersion: the Nix tier asks for the same Nix the product does.
func TestMinNixVersion(t *testing.T) {
	if MinNixVersion != nixgen.MinNixVersion {
		t.Errorf("testtier.MinNixVersion %q, nixgen.MinNixVersion %q", MinNixVersion, nixgen.MinNixVersion)
	}
}

func TestAtLeast(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want bool
	}{
		{"nix (Nix) 2.26.3\n", true},
		{"nix (Nix) 2.18", true},
		{"nix (Nix) 2.18.0pre20230101_abc", true},
		{"nix (Nix) 2.8.0", false},
		{"nix (Nix) 2.17.9", false},
		{"nix (Determinate Nix 3.8.2) 2.30.1", true},
		{"nix (Nix) 3.0", true},
		{"", false},
	} {
		if got := atLeast(tc.out, "2.18"); got != tc.want {
			t.Errorf("atLeast(%q, 2.18) = %v, want %v", tc.out, got, tc.want)
		}
	}
}
