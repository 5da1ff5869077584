package nixgen

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/workflow"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current output")

// examples are the workflows whose generated flakes are pinned as golden
// files; those without a nixpkgs pin have no flake.
func examples(t *testing.T) map[string]*workflow.Workflow {
	t.Helper()
	paths, err := filepath.Glob("../examples/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	out := map[string]*workflow.Workflow{"sample": sampleWorkflow()}
	for _, p := range paths {
		w, _, err := workflow.ParseFile(p)
		if err != nil {
			t.Fatalf("parse %s: %v", p, err)
		}
		if w.Nixpkgs == nil {
			continue
		}
		out[strings.TrimSuffix(filepath.Base(p), ".yaml")] = w
	}
	return out
}

func TestGolden(t *testing.T) {
	for name, w := range examples(t) {
		t.Run(name, func(t *testing.T) {
			fs, err := Generate(w, Options{})
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join("testdata", "golden", name)
			if *update {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				if err := fs.WriteDir(dir); err != nil {
					t.Fatal(err)
				}
			}
			var onDisk []string
			filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					rel, _ := filepath.Rel(dir, p)
					onDisk = append(onDisk, filepath.ToSlash(rel))
				}
				return nil
			})
			if got, want := strings.Join(fs.Paths(), " "), strings.Join(sortedCopy(onDisk), " "); strings.Join(sortedCopy(fs.Paths()), " ") != want {
				t.Errorf("files = %s, golden has %s (run go test ./nixgen -update)", got, want)
			}
			for _, f := range fs {
				want, err := os.ReadFile(filepath.Join(dir, f.Path))
				if err != nil {
					t.Fatalf("%v (run go test ./nixgen -update)", err)
				}
				if !bytes.Equal(f.Data, want) {
					t.Errorf("%s differs from %s (run go test ./nixgen -update and review the diff)", f.Path, filepath.Join(dir, f.Path))
				}
			}
		})
	}
}

func sortedCopy(s []string) []string {
	c := append([]string(nil), s...)
	for i := range c {
		for j := i + 1; j < len(c); j++ {
			if c[j] < c[i] {
				c[i], c[j] = c[j], c[i]
			}
		}
	}
	return c
}

func TestDeterministic(t *testing.T) {
	for name, w := range examples(t) {
		a, err := Generate(w, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			b, err := Generate(w, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(a) != len(b) {
				t.Fatalf("%s: %d files, then %d", name, len(a), len(b))
			}
			for j := range a {
				if a[j].Path != b[j].Path || !bytes.Equal(a[j].Data, b[j].Data) {
					t.Fatalf("%s: %s differs between runs", name, a[j].Path)
				}
			}
		}
	}
}

// TestFormatted checks the house layout of every generated file: two-space
// indentation, no tabs, no trailing blanks, balanced brackets, one final
// newline.
func TestFormatted(t *testing.T) {
	for name, w := range examples(t) {
		fs, err := Generate(w, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			s := string(f.Data)
			if strings.Contains(s, "\n\n\n") {
				t.Errorf("%s/%s: two blank lines in a row", name, f.Path)
			}
			if !strings.HasSuffix(s, "}\n") || strings.HasSuffix(s, "\n\n") {
				t.Errorf("%s/%s: does not end in one newline after the closing brace", name, f.Path)
			}
			for i, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
				indent := len(line) - len(strings.TrimLeft(line, " "))
				switch {
				case strings.Contains(line, "\t"):
					t.Errorf("%s/%s:%d: tab", name, f.Path, i+1)
				case strings.TrimRight(line, " ") != line:
					t.Errorf("%s/%s:%d: trailing blank", name, f.Path, i+1)
				case indent%2 != 0:
					t.Errorf("%s/%s:%d: odd indentation %q", name, f.Path, i+1, line)
				}
			}
		}
	}
}

func TestGenerateErrors(t *testing.T) {
	mod := func(f func(w *workflow.Workflow)) *workflow.Workflow {
		w := sampleWorkflow()
		f(w)
		return w
	}
	for _, c := range []struct {
		name string
		w    *workflow.Workflow
		want string
	}{
		{"no nixpkgs", mod(func(w *workflow.Workflow) { w.Nixpkgs = nil }), "pins no nixpkgs"},
		{"bad step name", mod(func(w *workflow.Workflow) { w.Steps[0].Name = `x"y` }), "not a DNS label"},
		{"path step name", mod(func(w *workflow.Workflow) { w.Steps[0].Name = `../x` }), "not a DNS label"},
		{"dup step", mod(func(w *workflow.Workflow) { w.Steps[1].Name = w.Steps[0].Name }), "appears twice"},
		{"hypervisor", mod(func(w *workflow.Workflow) { w.Steps[0].Hypervisor = "vfkit" }), "not supported"},
		{"vcpu", mod(func(w *workflow.Workflow) { w.Steps[0].Resources.VCPU = 0 }), "vcpu"},
		{"memory", mod(func(w *workflow.Workflow) { w.Steps[0].Resources.Memory = 0 }), "memory"},
		{"empty attr", mod(func(w *workflow.Workflow) { w.Steps[0].Packages = []string{"a..b"} }), "empty attribute"},
		{"nul", mod(func(w *workflow.Workflow) { w.Name = "a\x00" }), "NUL"},
		{"allow", mod(func(w *workflow.Workflow) { w.Steps[0].Network.Allow = []string{`evil"; x = 1; ":80`} }), "network.allow"},
		{"port", mod(func(w *workflow.Workflow) { w.Steps[0].Network.Allow = []string{"a.b:99999"} }), "port"},
	} {
		_, err := Generate(c.w, Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", c.name, err, c.want)
		}
	}
}

func TestMemMiB(t *testing.T) {
	for _, c := range []struct {
		bytes int64
		hv    workflow.Hypervisor
		want  int
	}{
		{512 << 20, workflow.HypervisorQEMU, 512},
		{512<<20 + 1, workflow.HypervisorQEMU, 513},
		{2 << 30, workflow.HypervisorQEMU, 2049},
		{2 << 30, workflow.HypervisorCloudHypervisor, 2048},
		{4 << 30, workflow.HypervisorQEMU, 4096},
	} {
		if got, _ := MemMiB(c.bytes, c.hv); got != c.want {
			t.Errorf("MemMiB(%d, %s) = %d, want %d", c.bytes, c.hv, got, c.want)
		}
	}
}

func TestAttrs(t *testing.T) {
	var o Options
	var h EnvHash
	h[0], h[7], h[8] = 0xab, 0x01, 0xff
	if got := h.Name(); got != "env-ab00000000000001" {
		t.Errorf("Name = %q", got)
	}
	if got := o.RunnerAttr(h); got != "packages.x86_64-linux.env-ab00000000000001" {
		t.Errorf("RunnerAttr = %q", got)
	}
	if got := o.EnvAttr(h); got != "legacyPackages.x86_64-linux.stepEnvs.env-ab00000000000001" {
		t.Errorf("EnvAttr = %q", got)
	}
	if got := o.TCGRunnerAttr(h); got != "legacyPackages.x86_64-linux.tcgRunners.env-ab00000000000001" {
		t.Errorf("TCGRunnerAttr = %q", got)
	}
	if got := (Options{System: "aarch64-linux"}).RunnerAttr(h); got != "packages.aarch64-linux.env-ab00000000000001" {
		t.Errorf("RunnerAttr = %q", got)
	}
	if got := ConfigAttr(h); got != "nixosConfigurations.env-ab00000000000001" {
		t.Errorf("ConfigAttr = %q", got)
	}
}

func TestParseAllow(t *testing.T) {
	for _, c := range []struct {
		in   string
		want allowRule
		bad  bool
	}{
		{in: "*", want: allowRule{Host: "*"}},
		{in: "pypi.org", want: allowRule{Host: "pypi.org"}},
		{in: "pypi.org:443", want: allowRule{Host: "pypi.org", Port: 443}},
		{in: "*.github.com:22", want: allowRule{Host: "*.github.com", Port: 22}},
		{in: "10.0.0.0/8:5432", want: allowRule{CIDR: "10.0.0.0/8", Port: 5432}},
		{in: "192.0.2.7", want: allowRule{CIDR: "192.0.2.7/32"}},
		{in: "2001:db8::/32", want: allowRule{CIDR: "2001:db8::/32"}},
		{in: "[2001:db8::1]:443", want: allowRule{CIDR: "2001:db8::1/128", Port: 443}},
		{in: "Example.com", bad: true},
		{in: "a b", bad: true},
		{in: "x:0", bad: true},
		{in: "x:", bad: true},
		{in: "10.0.0.1/8", bad: true},
		{in: `"; drop`, bad: true},
		{in: "[1.2.3.4]:80", bad: true},
	} {
		got, err := parseAllow(c.in)
		if c.bad {
			if err == nil {
				t.Errorf("parseAllow(%q) = %+v, want an error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parseAllow(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

// TestMicrovmOptions checks each microvm.nix option the step modules set
// against the facts in shared/reference/microvm-nix.md: option names,
// hypervisor values, share protocol per hypervisor, tap ids of at most 15
// characters, locally administered unicast MACs, and 2048 MiB avoided.
func TestMicrovmOptions(t *testing.T) {
	// Options of microvm.nix (nixos-modules/microvm/options.nix) we may set.
	known := map[string]bool{
		"hypervisor": true, "vcpu": true, "mem": true, "socket": true, "shares": true,
		"volumes": true, "interfaces": true,
		// tcg.nix: microvm.cpu (options.nix: the CPU to emulate; setting it
		// drops -enable-kvm from the qemu runner) and microvm.qemu.machineOpts
		// (lib/runners/qemu.nix: replaces the default accel=kvm:tcg set).
		"cpu": true, "qemu": true,
		// registerClosure (options.nix, since 2025-10): false keeps the
		// guest system's regInfo out of the runner's closure.
		"registerClosure": true,
	}
	shareKeys := map[string]bool{"proto": true, "tag": true, "source": true, "mountPoint": true, "securityModel": true, "socket": true, "readOnly": true}
	volumeKeys := map[string]bool{"image": true, "mountPoint": true, "label": true, "size": true, "autoCreate": true, "fsType": true, "readOnly": true}
	ifaceKeys := map[string]bool{"type": true, "id": true, "mac": true}
	hypervisors := map[string]bool{"qemu": true, "cloud-hypervisor": true, "firecracker": true, "crosvm": true, "kvmtool": true, "stratovirt": true, "alioth": true}
	protoFor := map[string]string{"qemu": "9p", "cloud-hypervisor": "virtiofs", "firecracker": ""}
	securityModels := map[string]bool{"passthrough": true, "none": true, "mapped": true, "mapped-file": true}
	macRE := regexp.MustCompile(`^([0-9a-f]{2}:){5}[0-9a-f]{2}$`)

	for name, w := range examples(t) {
		for _, s := range w.Steps {
			e, err := EnvironmentOf(&s)
			if err != nil {
				t.Fatal(err)
			}
			sd, _, err := envFor(e.Hash(), e)
			if err != nil {
				t.Fatal(err)
			}
			hv := unquote(t, sd.Hypervisor)
			if !hypervisors[hv] {
				t.Errorf("%s/%s: hypervisor %q is not a microvm.nix hypervisor", name, s.Name, hv)
			}
			if sd.Mem == "2048" && hv == "qemu" {
				t.Errorf("%s/%s: mem 2048 hangs qemu", name, s.Name)
			}
			want := protoFor[hv]
			if want == "" && len(sd.Shares) > 0 {
				t.Errorf("%s/%s: firecracker has no shares, got %d", name, s.Name, len(sd.Shares))
			}
			if want == "" && len(sd.Volumes) != 2 {
				t.Errorf("%s/%s: firecracker needs the control and workspace volumes", name, s.Name)
			}
			tags := map[string]string{}
			for _, sh := range sd.Shares {
				if p := unquote(t, sh.Proto); p != want {
					t.Errorf("%s/%s: share proto %q with %s, want %q", name, s.Name, p, hv, want)
				}
				if sh.SecurityModel != "" && !securityModels[unquote(t, sh.SecurityModel)] {
					t.Errorf("%s/%s: securityModel %s", name, s.Name, sh.SecurityModel)
				}
				if (unquote(t, sh.Proto) == "virtiofs") != (sh.Socket != "") {
					t.Errorf("%s/%s: virtiofs shares and only they name a socket", name, s.Name)
				}
				tags[unquote(t, sh.Tag)] = unquote(t, sh.MountPoint)
			}
			if want != "" && (tags[guest.ControlTag] != guest.ControlMount || tags[guest.WorkspaceTag] != guest.WorkspaceMount) {
				t.Errorf("%s/%s: shares %v do not match guest/protocol.go", name, s.Name, tags)
			}
			if s.Network.HasEgress() != (sd.Tap != nil) {
				t.Errorf("%s/%s: tap present = %v, egress = %v", name, s.Name, sd.Tap != nil, s.Network.HasEgress())
			}
			if sd.Tap != nil {
				id, mac := unquote(t, sd.Tap.ID), unquote(t, sd.Tap.MAC)
				if len(id) > 15 || !strings.HasPrefix(id, "asb") || strings.ContainsAny(id, "/ ") {
					t.Errorf("%s/%s: tap id %q longer than 15 or not asb-prefixed", name, s.Name, id)
				}
				if !macRE.MatchString(mac) || mac[:2] != "02" {
					t.Errorf("%s/%s: mac %q is not locally administered unicast", name, s.Name, mac)
				}
			}
		}
		// The rendered modules use only known option names.
		fs, err := Generate(w, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs[1:] {
			checkMicrovmKeys(t, name+"/"+f.Path, string(f.Data), known, shareKeys, volumeKeys, ifaceKeys)
		}
	}
}

// checkMicrovmKeys reads the attribute names inside `microvm = { ... };` of
// a generated module by indentation (the generator's fixed layout).
func checkMicrovmKeys(t *testing.T, file, s string, top, share, volume, iface map[string]bool) {
	t.Helper()
	in, list := false, ""
	keyRE := regexp.MustCompile(`^( +)([A-Za-z]+) = `)
	for _, line := range strings.Split(s, "\n") {
		switch {
		case line == "  microvm = {":
			in = true
			continue
		case in && line == "  };":
			return
		case !in:
			continue
		}
		m := keyRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		switch len(m[1]) {
		case 4:
			if !top[m[2]] {
				t.Errorf("%s: microvm.%s is not an option this generator may set", file, m[2])
			}
			list = m[2]
		case 8:
			ok := map[string]map[string]bool{"shares": share, "volumes": volume, "interfaces": iface}[list]
			if !ok[m[2]] {
				t.Errorf("%s: microvm.%s.*.%s is not a microvm.nix option", file, list, m[2])
			}
		}
	}
	if !in {
		t.Errorf("%s: no microvm block", file)
	}
}

func unquote(t *testing.T, lit string) string {
	t.Helper()
	var s string
	if err := json.Unmarshal([]byte(lit), &s); err != nil {
		t.Fatalf("literal %s: %v", lit, err)
	}
	return s
}

func TestWriteDir(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "keep.txt")
	if err := os.WriteFile(other, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs, err := Generate(sampleWorkflow(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := fs.WriteDir(dir); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range fs {
		b, err := os.ReadFile(filepath.Join(dir, f.Path))
		if err != nil || !bytes.Equal(b, f.Data) {
			t.Errorf("%s: %v", f.Path, err)
		}
	}
	if b, _ := os.ReadFile(other); string(b) != "mine" {
		t.Error("WriteDir touched a file it did not generate")
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "envs"))
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
	bad := Files{{Path: "../escape.nix", Data: []byte("x")}}
	if err := bad.WriteDir(dir); err == nil {
		t.Error("WriteDir accepted a path outside the directory")
	}
}

// TestGeneratedNixParses runs nix-instantiate --parse on every generated
// file of every example, and on the hand-written modules/guest.nix and the
// project flake.nix.
func TestGeneratedNixParses(t *testing.T) {
	testtier.Nix(t)
	for name, w := range examples(t) {
		dir := t.TempDir()
		fs, err := Generate(w, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := fs.WriteDir(dir); err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			nixParse(t, name+"/"+f.Path, filepath.Join(dir, f.Path))
		}
	}
	nixParse(t, "modules/guest.nix", "../modules/guest.nix")
	nixParse(t, "flake.nix", "../flake.nix")
}

func nixParse(t *testing.T, name, path string) {
	t.Helper()
	out, err := exec.Command("nix-instantiate", "--parse", path).CombinedOutput()
	if err != nil {
		t.Errorf("nix-instantiate --parse %s: %v\n%s", name, err, out)
	}
}
