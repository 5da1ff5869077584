package nixgen

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/workflow"
)

// TestRequiredNix: what a workflow's generated flake needs of Nix, known
// before anything is evaluated.
func TestRequiredNix(t *testing.T) {
	pin := &workflow.Nixpkgs{Ref: "github:NixOS/nixpkgs/8fd9daa3db09ced9700431c5b7ad0e8ba199b575"}
	own := &workflow.Microvm{Ref: "github:microvm-nix/microvm.nix/0123456789012345678901234567890123456789"}
	ns := workflow.Step{Name: "prep", Isolation: workflow.IsolationNamespace, Packages: []string{"jq"}}
	vm := workflow.Step{Name: "train", Isolation: workflow.IsolationVM}
	lockOf := func(day string) []byte {
		d, err := time.Parse("2006-01-02", day)
		if err != nil {
			t.Fatal(err)
		}
		return []byte(fmt.Sprintf(`{"nodes":{"nixpkgs":{"locked":{"lastModified":%d,"narHash":"sha256-x","type":"github"}},`+
			`"root":{"inputs":{"nixpkgs":"nixpkgs"}}},"root":"root","version":7}`, d.Unix()))
	}
	for _, tc := range []struct {
		name    string
		w       *workflow.Workflow
		lock    []byte
		version string
		why     string
	}{
		{"no nixpkgs: no flake", &workflow.Workflow{Steps: []workflow.Step{ns}}, nil, "", ""},
		{"a nixpkgs never locked", &workflow.Workflow{Nixpkgs: pin, Steps: []workflow.Step{ns}}, nil, "2.18", "not locked yet"},
		{"nixos-25.11, locked", &workflow.Workflow{Nixpkgs: pin, Steps: []workflow.Step{ns}}, lockOf("2026-05-10"), "2.18", "nixpkgs is of 2026-05-10, and nixpkgs since 2025-08"},
		{"a 2024 nixpkgs, packages only", &workflow.Workflow{Nixpkgs: pin, Steps: []workflow.Step{ns}}, lockOf("2024-11-30"), "", ""},
		{"a 2024 nixpkgs and the default microvm.nix", &workflow.Workflow{Nixpkgs: pin, Steps: []workflow.Step{ns, vm}}, lockOf("2024-11-30"), "2.18", "step train's VM is built with microvm.nix 71beea0076cd (agentsandbox's default)"},
		{"a 2024 nixpkgs and a microvm.nix of its time", &workflow.Workflow{Nixpkgs: pin, Microvm: own, Steps: []workflow.Step{vm}}, lockOf("2024-11-30"), "", ""},
		{"a lock that is not JSON", &workflow.Workflow{Nixpkgs: pin, Steps: []workflow.Step{ns}}, []byte("{"), "2.18", "not locked yet"},
	} {
		r := RequiredNix(tc.w, tc.lock)
		if r.Version != tc.version || !strings.Contains(strings.Join(r.Why, "; "), tc.why) {
			t.Errorf("%s: RequiredNix = %+v; want %q because %q", tc.name, r, tc.version, tc.why)
		}
	}
}
