package vmfixture

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// ForTest builds the fixture for a test of the vm tier, as root: it needs
// qemu, a static busybox, a Nix that builds and Debian's kernel (fetched
// once into CacheDir; without it the test is skipped, or fails under
// CI=true), builds the static agent as the initramfs's /init, and writes
// the fixture's offline flake into a directory of the test's, which it
// returns with the fixture.
func ForTest(t testing.TB, o Options) (*Fixture, string) {
	t.Helper()
	testtier.Root(t)
	testtier.Command(t, "vm", "qemu-system-x86_64", "apt-get install qemu-system-x86")
	testtier.Command(t, "vm", "busybox", "apt-get install busybox-static")
	testtier.NixBuild(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := FindOrFetchKernel(ctx, CacheDir()); err != nil {
		testtier.Skip(t, "vm", err.Error())
	}
	dir := t.TempDir()
	init, err := BuildGuestAgent(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	o.Init = init
	flake := filepath.Join(dir, "flake")
	fx, err := BuildNix(ctx, flake, o, nil)
	if err != nil {
		t.Fatalf("build the VM fixture: %v", err)
	}
	return fx, flake
}
