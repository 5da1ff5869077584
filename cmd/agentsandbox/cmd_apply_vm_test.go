package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/vmfixture"
	"github.com/agentsandbox/agentsandbox/nixgen"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// vmFlake builds the VM test fixture (Debian's kernel, an initramfs with
// the static guest agent as /init, a microvm.nix-shaped qemu runner) as an
// offline flake that exports the runner under the attributes apply
// realises for steps, and returns the flake's directory for --flake.
func vmFlake(t *testing.T, steps ...string) string {
	t.Helper()
	_, flake := vmfixture.ForTest(t, vmfixture.Options{Steps: defaultEnvNames(t, steps)})
	return flake
}

// defaultEnvNames is the attribute name apply builds for each of steps when
// it has the built-in defaults (no packages, qemu, 1 vcpu, 512 MiB, no
// network), as the fixture's steps all do: one environment, so one name.
func defaultEnvNames(t *testing.T, steps []string) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	for _, name := range steps {
		w, err := workflow.Parse("fixture.yaml", []byte("apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: fixture\nsteps:\n  - name: "+name+"\n    run: \"true\"\n"))
		if err != nil {
			t.Fatal(err)
		}
		e, err := nixgen.EnvironmentOf(&w.Steps[0])
		if err != nil {
			t.Fatal(err)
		}
		if n := e.Hash().Name(); !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// TestApplyVM runs apply --isolation vm end to end in a real qemu guest:
// status, logs and outputs land in a record that verifies, an output's NAR
// hash equals `nix hash path`, and a failing job's exit code comes back.
func TestApplyVM(t *testing.T) {
	flake := vmFlake(t, "hello", "fails")
	dir := t.TempDir()
	wf := filepath.Join(dir, "vm.yaml")
	os.WriteFile(wf, []byte(`apiVersion: agentsandbox.dev/v1
kind: Workflow
name: vm-hello
steps:
  - name: hello
    run: |
      echo "hello from $(uname -n)"
      mkdir -p out && echo guest > out/where.txt
    outputs: [out]
    resources: {timeout: 2m}
`), 0o644)
	state := filepath.Join(dir, "state")
	code, out, stderr := execute(t, "apply", "--isolation", "vm", "--flake", flake, "--offline", "--state-dir", state, wf)
	if code != ExitOK {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, stderr)
	}
	if !strings.Contains(out, "vm (qemu, ") || !strings.Contains(stderr, "[hello] hello from") {
		t.Errorf("no vm isolation in the summary or no job output in the progress:\n%s\n%s", out, stderr)
	}
	id := lastLine(out)
	if code, vout, verr := execute(t, "records", "verify", "--state-dir", state, id); code != ExitOK {
		t.Fatalf("verify: exit %d\n%s%s", code, vout, verr)
	}
	s, _ := record.OpenStore(state)
	rid, _ := record.ParseID(id)
	rec, err := s.Get(rid)
	if err != nil {
		t.Fatal(err)
	}
	st := rec.Steps[0]
	if st.Isolation != "vm" || st.Accel == "" || st.Logs.Console == nil || len(st.Closure) == 0 {
		t.Errorf("step record: isolation %q accel %q console %v closure %d", st.Isolation, st.Accel, st.Logs.Console, len(st.Closure))
	}
	// One decision, stated everywhere: the record says which accelerator
	// and why, and apply warned of software emulation exactly when the VM
	// ran under it, with the record's reason.
	warned := strings.Contains(stderr, "warning: VMs run under software emulation (TCG), much slower: "+st.AccelReason)
	if st.AccelReason == "" || warned != (st.Accel == "tcg") || strings.Count(stderr, "software emulation") > 1 {
		t.Errorf("accel %q because %q; apply's stderr does not state that decision once:\n%s", st.Accel, st.AccelReason, stderr)
	}
	exp := filepath.Join(dir, "export")
	if code, _, eerr := execute(t, "records", "export", "--state-dir", state, id, "--to", exp); code != ExitOK {
		t.Fatalf("export: %s", eerr)
	}
	got, err := exec.Command("nix", "--extra-experimental-features", "nix-command", "hash", "path", filepath.Join(exp, "hello", "out")).Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(got)) != st.Outputs[0].NarHash.String() {
		t.Errorf("nix hash path %s, record %s", got, st.Outputs[0].NarHash)
	}

	// A failing job's exit code comes back through result.json.
	os.WriteFile(wf, []byte("apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: vm-fails\nsteps:\n  - name: fails\n    run: exit 42\n    resources: {timeout: 2m}\n"), 0o644)
	code, out, stderr = execute(t, "apply", "--isolation", "vm", "--flake", flake, "--offline", "--state-dir", state, wf)
	if code != ExitStepFailed || !strings.Contains(out, "fails  failed  42") {
		t.Fatalf("failing job: exit %d, want %d\n%s\n%s", code, ExitStepFailed, out, stderr)
	}
}

// TestApplyPushesClosure: apply --push-cache signs the closure it realised
// and copies it to a binary cache another machine can substitute from
// (nixbuild's TestRealNixSubstitution shows one doing so): every path of
// the record's closure has a narinfo there, signed by the given key.
func TestApplyPushesClosure(t *testing.T) {
	flake := vmFlake(t, "hello")
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	secret, err := exec.Command("nix", "--extra-experimental-features", "nix-command", "key", "generate-secret", "--key-name", "node-a-1").Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	wf := filepath.Join(dir, "vm.yaml")
	os.WriteFile(wf, []byte("apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: vm-push\nsteps:\n  - name: hello\n    run: \"true\"\n    resources: {timeout: 2m}\n"), 0o644)
	state, cache := filepath.Join(dir, "state"), filepath.Join(dir, "cache")
	code, out, stderr := execute(t, "apply", "--isolation", "vm", "--flake", flake, "--offline", "--state-dir", state,
		"--push-cache", "file://"+cache, "--signing-key", key, wf)
	if code != ExitOK {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, stderr)
	}
	if !strings.Contains(stderr, "signed, to file://"+cache) {
		t.Errorf("apply did not say it pushed:\n%s", stderr)
	}
	s, _ := record.OpenStore(state)
	rid, _ := record.ParseID(lastLine(out))
	rec, err := s.Get(rid)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Steps[0].Closure) == 0 {
		t.Fatal("the record has no closure")
	}
	for _, p := range rec.Steps[0].Closure {
		hash, _, _ := strings.Cut(filepath.Base(p.Path), "-")
		ni, err := os.ReadFile(filepath.Join(cache, hash+".narinfo"))
		if err != nil {
			t.Errorf("%s is not in the cache: %v", p.Path, err)
			continue
		}
		if !strings.Contains(string(ni), "\nSig: node-a-1:") || !strings.Contains(string(ni), "StorePath: "+p.Path+"\n") {
			t.Errorf("%s.narinfo is not signed by node-a-1:\n%s", hash, ni)
		}
	}
}
