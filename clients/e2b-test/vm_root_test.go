package e2btest

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/internal/vmfixture"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server"
	"github.com/agentsandbox/agentsandbox/server/e2b"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/namespace"
	"github.com/agentsandbox/agentsandbox/vmrunner/vm"
	"github.com/agentsandbox/agentsandbox/workflow"
	"golang.org/x/sys/unix"
)

// vmTemplate is the template the SDK names ("vm.yaml#box"). Nix cannot
// fetch nixpkgs here, so the server's realiser hands out the VM test
// fixture's runner for it instead of building the generated flake.
const vmTemplate = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: vm-template
nixpkgs: github:NixOS/nixpkgs/8fd9daa3db09ced9700431c5b7ad0e8ba199b575
steps:
  - name: box
    isolation: vm
    run: "true"
`

// TestE2BSDKVM drives a VM sandbox with the unmodified SDK (vm tier):
// vmtest/vm.test.mjs against the real server, E2B transport and sandbox
// manager, with the namespace and vm backends serve has, in process. What
// differs from `agentsandbox serve` is only the realiser: the template's
// runner is the fixture's (Debian's kernel, an initramfs with the static
// agent as init and bash for the SDK's `/bin/bash -l -c`), run under TCG.
func TestE2BSDKVM(t *testing.T) {
	fx, _ := vmfixture.ForTest(t, vmfixture.Options{HostBinaries: []string{"/bin/bash"}})
	nodeBin := npmCI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	store, err := record.OpenStore(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(ctx, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	templates := filepath.Join(dir, "templates")
	if err := os.MkdirAll(templates, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(templates, "vm.yaml"), []byte(vmTemplate), 0o644); err != nil {
		t.Fatal(err)
	}
	hostState := filepath.Join(dir, "host-state")
	mgr, err := sandboxes.New(sandboxes.Options{
		TemplateDir: templates,
		Engine: engine.Options{
			Jobs: 1, Host: engine.Host{Root: true, Nix: true, QEMU: true}, Store: store,
			RunRoot: filepath.Join(store.Dir(), "runs"), HostStateDir: hostState,
			Backends: map[workflow.Isolation]vmrunner.Backend{
				workflow.IsolationNamespace: namespace.New(namespace.Options{StateDir: hostState, JailDir: filepath.Join(dir, "jails")}),
				workflow.IsolationVM:        vm.New(vm.Options{StateDir: hostState, WorkDir: filepath.Join(dir, "vms"), Accel: "tcg"}),
			},
			Policy: pol, ToolVersion: "test",
		},
		Realiser: func(*workflow.Workflow, string) engine.RealiseFunc { return fx.Realise },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close(context.Background())
	srv, err := server.New(server.Options{Manager: mgr, Token: testToken, Version: "test",
		Transports: e2b.New(mgr, e2b.Options{Logf: t.Logf}).Transports()})
	if err != nil {
		t.Fatal(err)
	}
	l, err := srv.ListenTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	defer func() {
		shutdown, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.Shutdown(shutdown); err != nil && err != http.ErrServerClosed {
			t.Errorf("shut the server down: %v", err)
		}
	}()

	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	cmd := exec.CommandContext(ctx, nodeBin, "--test", "--test-reporter=tap", "vmtest/vm.test.mjs")
	cmd.Env = append(os.Environ(), "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url, "E2B_API_KEY="+testToken,
		"E2B_DOMAIN=", "E2B_DEBUG=", "NO_COLOR=1", "HOST_KERNEL="+unix.ByteSliceToString(uts.Release[:]))
	b, err := cmd.CombinedOutput()
	out := string(b)
	t.Logf("node --test vmtest/vm.test.mjs:\n%s", out)
	if err != nil {
		t.Errorf("node --test vmtest/vm.test.mjs: %v", err)
	}
	for _, want := range []string{"# pass 1", "# fail 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("node --test: no %q in its summary", want)
		}
	}
	// Nothing of the sandbox is left running.
	left, err := mgr.List(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range left {
		if info.State == sandboxes.StateRunning {
			t.Errorf("sandbox %s still running after the suite", info.ID)
		}
	}
}
