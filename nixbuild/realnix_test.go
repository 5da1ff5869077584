package nixbuild

import (
	"bytes"
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

const (
	attrHello  = "packages.x86_64-linux.hello"
	attrTree   = "packages.x86_64-linux.tree"
	attrBroken = "packages.x86_64-linux.broken"
)

// fixture is a temp flake (testdata/flake.nix) with a local path input
// (testdata/tools) holding a static busybox: no nixpkgs, no network.
type fixture struct {
	flakeDir, toolsDir, lock string
}

// newFixture needs the nix tier and a static busybox (busybox-static).
func newFixture(t testing.TB) fixture {
	t.Helper()
	testtier.NixBuild(t)
	bb := testtier.Command(t, "nix", "busybox", "apt-get install busybox-static")
	if f, err := elf.Open(bb); err != nil {
		testtier.Skip(t, "nix", "read "+bb+": "+err.Error())
	} else {
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				testtier.Skip(t, "nix", bb+" is dynamically linked; install busybox-static")
			}
		}
		f.Close()
	}
	// Nix keeps its caches under $HOME; keep them out of the real one.
	t.Setenv("HOME", t.TempDir())

	root := t.TempDir()
	fx := fixture{
		flakeDir: filepath.Join(root, "flake"),
		toolsDir: filepath.Join(root, "tools"),
		lock:     filepath.Join(root, "ml.yaml.lock"),
	}
	for _, d := range []string{fx.flakeDir, filepath.Join(fx.toolsDir, "bb")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fx.toolsDir, "bb", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	// busybox picks its applet from argv[0]; Nix runs the builder by path.
	if err := os.Symlink("busybox", filepath.Join(fx.toolsDir, "bb", "sh")); err != nil {
		t.Fatal(err)
	}
	fx.setMessage(t, "v1")
	nonce := make([]byte, 8)
	rand.Read(nonce)
	fx.render(t, "flake.nix", fx.flakeDir, "@TOOLS@", fx.toolsDir, "@NONCE@", hex.EncodeToString(nonce))
	return fx
}

func (fx fixture) render(t testing.TB, name, dir string, oldnew ...string) {
	t.Helper()
	src := filepath.Join("testdata", name)
	if dir == fx.toolsDir {
		src = filepath.Join("testdata", "tools", name)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.NewReplacer(oldnew...).Replace(string(b))
	if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (fx fixture) setMessage(t testing.TB, msg string) {
	fx.render(t, "flake.nix", fx.toolsDir, "@MESSAGE@", msg)
}

func nixOutput(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("nix", append([]string{"--extra-experimental-features", ExperimentalFeatures}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("nix %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestRealNixBuildClosureAndLock(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	var log1 bytes.Buffer
	o := Options{Offline: true, LockFile: fx.lock, Stderr: &log1}
	outs, err := Build(ctx, fx.flakeDir, []string{attrHello, attrTree}, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 2 || outs[0].Attr != attrHello || outs[1].Attr != attrTree {
		t.Fatalf("outputs %+v", outs)
	}
	for _, out := range outs {
		if !strings.HasPrefix(out.Out, "/nix/store/") || !strings.HasSuffix(out.DrvPath, ".drv") {
			t.Errorf("output %+v", out)
		}
	}
	if b, err := os.ReadFile(outs[0].Out); err != nil || string(b) != "hello from v1\n" {
		t.Errorf("hello output %q, %v", b, err)
	}
	if !strings.Contains(log1.String(), "building '") {
		t.Errorf("first build did not build anything:\n%s", log1.String())
	}

	// The lock Nix wrote is kept next to the workflow.
	lock1, err := os.ReadFile(fx.lock)
	if err != nil {
		t.Fatalf("lock not kept next to the workflow: %v", err)
	}
	if !bytes.Contains(lock1, []byte(`"tools"`)) {
		t.Errorf("lock does not pin the tools input:\n%s", lock1)
	}
	lockInfo1, _ := os.Stat(fx.lock)

	// The closure of tree is tree and hello, each with the NAR hash Nix
	// itself computes.
	infos, err := Closure(ctx, []string{outs[1].Out})
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 {
		t.Fatalf("closure %+v, want hello and tree", infos)
	}
	got := map[string]PathInfo{infos[0].Path: infos[0], infos[1].Path: infos[1]}
	for _, out := range outs {
		info, ok := got[out.Out]
		if !ok {
			t.Fatalf("closure lacks %s: %+v", out.Out, infos)
		}
		if want := "sha256:" + nixOutput(t, "hash", "path", "--type", "sha256", "--base32", out.Out); info.NarHash != want {
			t.Errorf("%s: NarHash %s, nix hash path says %s", out.Out, info.NarHash, want)
		}
		if want := len(mustRun(t, "nix-store", "--dump", out.Out)); info.NarSize != int64(want) {
			t.Errorf("%s: NarSize %d, nix-store --dump gives %d bytes", out.Out, info.NarSize, want)
		}
		if want := strings.TrimSpace(mustRun(t, "nix-store", "--query", "--hash", out.Out)); info.NarHash != want {
			t.Errorf("%s: NarHash %s, nix-store --query --hash says %s", out.Out, info.NarHash, want)
		}
	}
	if refs := got[outs[1].Out].References; len(refs) != 1 || refs[0] != outs[0].Out {
		t.Errorf("tree references %q, want hello", refs)
	}

	// Same flake, same lock: served from the store, the lock untouched.
	var log2 bytes.Buffer
	o.Stderr = &log2
	again, err := Build(ctx, fx.flakeDir, []string{attrHello, attrTree}, o)
	if err != nil {
		t.Fatal(err)
	}
	if again[0].Out != outs[0].Out || again[1].Out != outs[1].Out {
		t.Errorf("second build gave %+v, first %+v", again, outs)
	}
	if strings.Contains(log2.String(), "building '") {
		t.Errorf("second build built again:\n%s", log2.String())
	}
	lockInfo2, _ := os.Stat(fx.lock)
	if !lockInfo2.ModTime().Equal(lockInfo1.ModTime()) {
		t.Error("an unchanged lock was rewritten")
	}

	// The input changes, but the lock pins the old one.
	fx.setMessage(t, "v2")
	pinned, err := Build(ctx, fx.flakeDir, []string{attrHello}, o)
	if err != nil {
		t.Fatal(err)
	}
	if pinned[0].Out != outs[0].Out {
		t.Errorf("with the lock, hello became %s; the pinned input gave %s", pinned[0].Out, outs[0].Out)
	}
	// Refreshing the lock on purpose picks the change up and keeps the new lock.
	o.UpdateLock = true
	fresh, err := Build(ctx, fx.flakeDir, []string{attrHello}, o)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(fresh[0].Out); string(b) != "hello from v2\n" {
		t.Errorf("after --update-lock hello says %q", b)
	}
	lock2, _ := os.ReadFile(fx.lock)
	if bytes.Equal(lock1, lock2) {
		t.Error("refreshing the lock did not change the workflow's lock file")
	}
}

func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestRealNixBuildFailureNamesStep(t *testing.T) {
	fx := newFixture(t)
	o := Options{Offline: true, LockFile: fx.lock, Steps: map[string]string{attrBroken: "train", attrHello: "prep"}}
	_, err := Build(context.Background(), fx.flakeDir, []string{attrHello, attrBroken}, o)
	if err == nil {
		t.Fatal("broken build succeeded")
	}
	msg := err.Error()
	for _, want := range []string{`step "train" (attribute ` + attrBroken + `)`, "this step is broken", "exit code 7"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, `step "prep"`) {
		t.Errorf("error blames the step that built:\n%s", msg)
	}
	if _, err := os.Stat(fx.lock); err == nil {
		t.Error("a failed build kept a lock next to the workflow")
	}

	_, err = Build(context.Background(), fx.flakeDir, []string{"packages.x86_64-linux.nope"}, Options{Offline: true})
	if err == nil || !strings.Contains(err.Error(), "attribute packages.x86_64-linux.nope") || !strings.Contains(err.Error(), "does not provide attribute") {
		t.Errorf("missing attribute: %v", err)
	}
}
