// Package testtier names the test tiers and decides, in one place, whether a
// test that needs more than pure Go may run.
//
// Tiers:
//   - pure: always runs; needs nothing but Go.
//   - nix: needs the nix and nix-instantiate commands of a Nix that
//     today's nixpkgs accepts (nixgen.MinNixVersion, 2.18, or later);
//     NixBuild also needs Nix able to build as root (its build users exist).
//   - root: needs uid 0 (namespaces, cgroups, netlink).
//   - vm: needs qemu-system-x86_64 and the test kernel fixture.
//
// Outside CI a test whose tier cannot run is skipped with a message saying
// what is missing. With CI=true the same situation fails the test: CI
// installs everything, so a skip there would hide a broken set-up.
package testtier

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strings"
	"testing"
)

// InCI reports whether the tests run in CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// skip skips the test outside CI and fails it in CI.
func skip(t testing.TB, tier, why string) {
	t.Helper()
	if InCI() {
		t.Fatalf("tier %s must run in CI but cannot: %s", tier, why)
	}
	t.Skipf("tier %s skipped: %s (CI=true turns this into a failure)", tier, why)
}

// Root needs uid 0.
func Root(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		skip(t, "root", "not running as root")
	}
}

// Nix needs the nix command line tools of a Nix at least
// nixgen.MinNixVersion; it returns the path of nix.
func Nix(t testing.TB) string {
	t.Helper()
	for _, c := range []string{"nix", "nix-instantiate", "nix-store"} {
		if _, err := exec.LookPath(c); err != nil {
			skip(t, "nix", c+" not found in PATH (scripts/install-nix.sh installs Nix 2.26)")
		}
	}
	p, _ := exec.LookPath("nix")
	out, err := exec.Command(p, "--version").Output()
	if err != nil {
		skip(t, "nix", p+" --version: "+err.Error())
	}
	if !atLeast(string(out), MinNixVersion) {
		skip(t, "nix", fmt.Sprintf("%s is %s, older than %s, the oldest Nix today's nixpkgs accepts: "+
			"scripts/install-nix.sh installs Nix 2.26 (make test runs it)", p, strings.TrimSpace(string(out)), MinNixVersion))
	}
	return p
}

// MinNixVersion is nixgen.MinNixVersion (a test keeps them equal; testtier
// cannot import nixgen, whose own tests import testtier).
const MinNixVersion = "2.18"

// atLeast says whether the version `nix --version` printed (its last
// word) is at least min, both MAJOR.MINOR[.PATCH...].
func atLeast(versionOutput, min string) bool {
	fields := strings.Fields(versionOutput)
	if len(fields) == 0 {
		return false
	}
	num := func(s string) []int {
		var n []int
		for _, p := range strings.Split(s, ".") {
			v, end := 0, 0
			for end < len(p) && p[end] >= '0' && p[end] <= '9' {
				v = v*10 + int(p[end]-'0')
				end++
			}
			n = append(n, v)
			if end < len(p) {
				break
			}
		}
		return n
	}
	have, want := num(fields[len(fields)-1]), num(min)
	for i := range want {
		h := 0
		if i < len(have) {
			h = have[i]
		}
		if h != want[i] {
			return h > want[i]
		}
	}
	return true
}

// NixBuild needs Nix able to build: the nix tier, and as root the group
// named by Nix's build-users-group setting must exist (Debian's nix-bin
// alone does not create it; scripts/install-nix.sh does). It returns nix's path.
func NixBuild(t testing.TB) string {
	t.Helper()
	nix := Nix(t)
	if os.Geteuid() != 0 {
		return nix
	}
	out, err := exec.Command(nix, "--extra-experimental-features", "nix-command", "show-config").Output()
	if err != nil {
		skip(t, "nix", "nix show-config: "+err.Error())
	}
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(line, " = ")
		if !ok || strings.TrimSpace(k) != "build-users-group" || strings.TrimSpace(v) == "" {
			continue
		}
		if _, err := user.LookupGroup(strings.TrimSpace(v)); err != nil {
			skip(t, "nix", "Nix builds as the members of group "+strings.TrimSpace(v)+", which does not exist: "+
				"scripts/install-nix.sh creates Nix's build users, or set 'build-users-group =' in /etc/nix/nix.conf")
		}
	}
	return nix
}

// Command needs the named program in PATH; it returns its path.
func Command(t testing.TB, tier, name, hint string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		skip(t, tier, name+" not found in PATH ("+hint+")")
	}
	return p
}

// Skip skips (or in CI fails) a test of tier for a reason found by the test.
func Skip(t testing.TB, tier, why string) {
	t.Helper()
	skip(t, tier, why)
}
