package nixbuild

import (
	"errors"
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Version
	}{
		{"nix (Nix) 2.26.3\n", Version{2, 26, 3}},
		{"nix (Nix) 2.8.0", Version{2, 8, 0}},
		{"2.18", Version{2, 18, 0}},
		{"nix (Nix) 2.31.0pre20250712_e09e9d5", Version{2, 31, 0}},
		{"nix (Determinate Nix 3.8.2) 2.30.1", Version{2, 30, 1}},
	} {
		got, err := ParseVersion(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "nix (Nix)", "nix version unknown"} {
		if v, err := ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q) = %v, want an error", bad, v)
		}
	}
	if !(Version{2, 8, 0}).Less(Version{2, 18, 0}) || (Version{2, 26, 3}).Less(Version{2, 18, 0}) || (Version{2, 18, 0}).Less(Version{2, 18, 0}) {
		t.Error("Less orders by number, not by text")
	}
}

// TestCheckVersion: a Nix older than needed is refused with what was
// found, where, what is needed and why, and how to get a newer one.
func TestCheckVersion(t *testing.T) {
	err := CheckVersion("nix (Nix) 2.8.0\n", "/usr/bin/nix", "2.18", "nixpkgs since 2025-08 needs it")
	var old *TooOldError
	if !errors.Is(err, ErrNixTooOld) || !errors.As(err, &old) {
		t.Fatalf("CheckVersion(2.8.0, 2.18) = %v, want a TooOldError", err)
	}
	for _, want := range []string{"nix (Nix) 2.8.0 at /usr/bin/nix is too old for this workflow, which needs Nix 2.18 or later", "nixpkgs since 2025-08 needs it", "scripts/install-nix.sh", "apt-get install nix-bin"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	for _, ok := range []string{"nix (Nix) 2.18.0", "nix (Nix) 2.26.3", "nix, version unreadable"} {
		if err := CheckVersion(ok, "/usr/local/bin/nix", "2.18", "x"); err != nil {
			t.Errorf("CheckVersion(%q, 2.18) = %v, want nil", ok, err)
		}
	}
}
