package workflow

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

const base = `
apiVersion: agentsandbox.dev/v1
kind: Workflow
name: demo
nixpkgs: github:NixOS/nixpkgs/8f3e1f807051e32d8c95cd12b9b421623850a34d
defaults:
  resources: {memory: 1GiB, timeout: 10m}
  env: {A: "1"}
inputs:
  data: {source: https://example.com/d.csv, sha256: 2c2d7b1cb7c4e34b6b1f5b6bfe6a7c6d1d3f0b1e8c4a0d9c6b5a4e3d2c1b0a99}
steps:
  - name: prep
    run: echo prep
    inputs: [data]
    packages: [python3, jq]
    outputs: [out/a]
  - name: train
    run: echo train
    needs: [prep]
    network: {allow: ["example.com:443"]}
    env: {B: "2"}
`

// Same meaning: keys reordered, comments added, quoting and flow/block
// style changed, steps and list entries reordered, defaults spelled out.
var sameMeaning = []string{
	`# a comment
kind: "Workflow"   # trailing comment
apiVersion: 'agentsandbox.dev/v1'
name: demo
steps:
  - run: "echo train"
    name: train
    env:
      B: '2'
    needs:
      - prep
      - prep
    network:
      allow: [Example.COM:443]
  - name: prep
    outputs: ["out/./a"]
    packages: [jq, python3]
    inputs: [data]
    run: echo prep
inputs:
  data:
    sha256: 2C2D7B1CB7C4E34B6B1F5B6BFE6A7C6D1D3F0B1E8C4A0D9C6B5A4E3D2C1B0A99
    source: https://example.com/d.csv
    dest: data
defaults:
  env:
    A: "1"
  resources:
    timeout: 600s
    memory: 1024MiB
    vcpu: 1
    pids: 256
nixpkgs:
  ref: github:NixOS/nixpkgs/8f3e1f807051e32d8c95cd12b9b421623850a34d
`,
	strings.ReplaceAll(base, "\n", "   \n"),
	strings.Replace(base, "  - name: prep", "# prep step\n  - name: prep", 1),
	strings.Replace(base, "env: {A: \"1\"}", "env: {A: 1}", 1),
	strings.Replace(base, "    run: echo train\n", "    run: echo train\n    isolation: auto\n    hypervisor: qemu\n", 1),
}

// Changes of meaning, each applied to base.
var changedMeaning = map[string][2]string{
	"step run":       {"echo train", "echo train2"},
	"memory":         {"memory: 1GiB", "memory: 1G"},
	"timeout":        {"timeout: 10m", "timeout: 11m"},
	"env value":      {`{B: "2"}`, `{B: "3"}`},
	"env override":   {`{B: "2"}`, `{B: "2", A: "9"}`},
	"network":        {"example.com:443", "example.com:80"},
	"no network":     {`network: {allow: ["example.com:443"]}`, `network: none`},
	"needs":          {"needs: [prep]", "needs: []"},
	"package":        {"[python3, jq]", "[python3]"},
	"output":         {"out/a", "out/b"},
	"input hash":     {"0a99}", "0a98}"},
	"nixpkgs":        {"8f3e1f807051e32d8c95cd12b9b421623850a34d", "9f3e1f807051e32d8c95cd12b9b421623850a34d"},
	"step name":      {"name: train", "name: trains"},
	"workflow name":  {"name: demo", "name: demo2"},
	"isolation":      {"    run: echo train\n", "    run: echo train\n    isolation: namespace\n"},
	"hypervisor":     {"    run: echo train\n", "    run: echo train\n    hypervisor: firecracker\n"},
	"vcpu":           {"{memory: 1GiB,", "{vcpu: 2, memory: 1GiB,"},
	"bandwidth":      {"{memory: 1GiB,", "{bandwidth: 1Mbit, memory: 1GiB,"},
	"io read":        {"{memory: 1GiB,", "{ioRead: 1MiB/s, memory: 1GiB,"},
	"io write":       {"{memory: 1GiB,", "{ioWrite: 1MiB/s, memory: 1GiB,"},
	"disk inodes":    {"{memory: 1GiB,", "{diskInodes: 5000, memory: 1GiB,"},
	"input dest":     {"0a99}", "0a99, dest: x}"},
	"trailing space": {"run: echo prep", `run: "echo prep "`},
}

func mustParse(t *testing.T, src string) *Workflow {
	t.Helper()
	w, err := Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatalf("parse:\n%v\nsource:\n%s", err, src)
	}
	return w
}

func TestHashIgnoresFormatting(t *testing.T) {
	want := mustParse(t, base)
	wc, _ := want.Canonical()
	for i, src := range sameMeaning {
		got := mustParse(t, src)
		if got.Hash() != want.Hash() {
			gc, _ := got.Canonical()
			t.Errorf("variant %d hashes differently:\n got %s\nwant %s", i, gc, wc)
		}
	}
}

func TestHashChangesWithMeaning(t *testing.T) {
	h := mustParse(t, base).Hash()
	seen := map[Hash]string{h: "base"}
	for name, ch := range changedMeaning {
		if !strings.Contains(base, ch[0]) {
			t.Fatalf("%s: %q not in base", name, ch[0])
		}
		w := mustParse(t, strings.Replace(base, ch[0], ch[1], 1))
		if prev, dup := seen[w.Hash()]; dup {
			t.Errorf("change %q hashes the same as %q", name, prev)
		}
		seen[w.Hash()] = name
	}
}

func TestCanonicalEmptyEqualsAbsent(t *testing.T) {
	a := &Workflow{APIVersion: APIVersion, Kind: Kind, Name: "x", Steps: []Step{{Name: "s", Run: "true"}}}
	b := &Workflow{APIVersion: APIVersion, Kind: Kind, Name: "x", Inputs: []Input{}, Steps: []Step{{Name: "s", Run: "true",
		Packages: []string{}, Env: map[string]string{}, Needs: []string{}, Inputs: []string{}, Outputs: []string{}, Network: Network{Allow: []string{}}}}}
	ca, _ := a.Canonical()
	cb, _ := b.Canonical()
	if string(ca) != string(cb) {
		t.Errorf("absent and empty differ:\n%s\n%s", ca, cb)
	}
	if strings.Contains(string(ca), "null") {
		t.Errorf("canonical form has null: %s", ca)
	}
}

func TestDefaults(t *testing.T) {
	w := mustParse(t, `
apiVersion: agentsandbox.dev/v1
kind: Workflow
name: d
defaults:
  resources: {vcpu: 2, timeout: 1h, bandwidth: 10Mbit, ioRead: 100MiB/s, ioWrite: 50MB/s}
  network: {allow: [example.com:443]}
  isolation: namespace
  hypervisor: firecracker
  env: {A: "1", B: "1"}
steps:
  - name: plain
    run: "true"
  - name: own
    run: "true"
    resources: {vcpu: 3, memory: 2GiB, pids: 64, disk: 100MiB, timeout: none, bandwidth: unlimited, ioRead: unlimited, ioWrite: 1GiB/s}
    network: none
    isolation: auto
    hypervisor: cloud-hypervisor
    env: {B: "2", C: "3"}
`)
	plain, _ := w.StepByName("plain")
	own, _ := w.StepByName("own")
	wantPlain := Resources{VCPU: 2, Memory: DefaultMemory, PIDs: DefaultPIDs, Disk: DefaultDisk, TimeoutMS: 3600000, Bandwidth: 10e6, IOReadBps: 100 << 20, IOWriteBps: 50e6}
	if plain.Resources != wantPlain {
		t.Errorf("plain resources %+v, want %+v", plain.Resources, wantPlain)
	}
	if !reflect.DeepEqual(plain.Network.Allow, []string{"example.com:443"}) || plain.Isolation != IsolationNamespace || plain.Hypervisor != HypervisorFirecracker {
		t.Errorf("plain: %+v", plain)
	}
	wantOwn := Resources{VCPU: 3, Memory: 2 << 30, PIDs: 64, Disk: 100 << 20, IOWriteBps: 1 << 30}
	if own.Resources != wantOwn {
		t.Errorf("own resources %+v, want %+v", own.Resources, wantOwn)
	}
	if len(own.Network.Allow) != 0 || own.Isolation != IsolationAuto || own.Hypervisor != HypervisorCloudHypervisor {
		t.Errorf("own: %+v", own)
	}
	if !reflect.DeepEqual(own.Env, map[string]string{"A": "1", "B": "2", "C": "3"}) {
		t.Errorf("own env %v", own.Env)
	}
	if _, ok := w.StepByName("nope"); ok {
		t.Error("StepByName found a missing step")
	}

	bare := mustParse(t, "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: b\nsteps: [{name: s, run: x}]\n")
	s := bare.Steps[0]
	if s.Resources != (Resources{VCPU: 1, Memory: 512 << 20, PIDs: 256, Disk: 1 << 30}) || s.Isolation != IsolationAuto || s.Hypervisor != HypervisorQEMU || len(s.Network.Allow) != 0 {
		t.Errorf("built-in defaults: %+v", s)
	}
}

func TestWaves(t *testing.T) {
	w := mustParse(t, `
apiVersion: agentsandbox.dev/v1
kind: Workflow
name: w
steps:
  - {name: d, run: x, needs: [b, c]}
  - {name: c, run: x, needs: [a]}
  - {name: b, run: x, needs: [a]}
  - {name: a, run: x}
  - {name: e, run: x}
  - {name: f, run: x, needs: [a, d]}
`)
	want := [][]string{{"a", "e"}, {"b", "c"}, {"d"}, {"f"}}
	if got := w.Waves(); !reflect.DeepEqual(got, want) {
		t.Errorf("Waves() = %v, want %v", got, want)
	}
}

func TestNixpkgsRev(t *testing.T) {
	const rev = "8f3e1f807051e32d8c95cd12b9b421623850a34d"
	for _, ref := range []string{
		"github:NixOS/nixpkgs/" + rev,
		"github:NixOS/nixpkgs?rev=" + rev,
		"git+https://github.com/NixOS/nixpkgs?ref=nixos-unstable&rev=" + rev,
		"gitlab:me/nixpkgs/" + rev,
	} {
		got, err := flakeRev(ref)
		if err != nil || got != rev {
			t.Errorf("flakeRev(%q) = %q, %v", ref, got, err)
		}
	}
	for _, ref := range []string{"github:NixOS/nixpkgs", "github:NixOS/nixpkgs/nixos-unstable", "nixpkgs",
		"https://github.com/NixOS/nixpkgs/archive/master.tar.gz", "github:NixOS/nixpkgs/" + strings.ToUpper(rev),
		"github:NixOS/nixpkgs/" + rev + "?rev=" + strings.Repeat("0", 40), ""} {
		if got, err := flakeRev(ref); err == nil {
			t.Errorf("flakeRev(%q) = %q, want an error", ref, got)
		}
	}
	w := mustParse(t, "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: n\nnixpkgs: github:NixOS/nixpkgs/"+rev+"\nsteps: [{name: s, run: x}]\n")
	if w.Nixpkgs.Rev != rev {
		t.Errorf("Rev = %q", w.Nixpkgs.Rev)
	}
}

// TestCanonicalIORates: the IO rates appear in the canonical form only when
// set, so a workflow without them keeps the hash it had before they existed.
func TestCanonicalIORates(t *testing.T) {
	const src = "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: b\nsteps: [{name: s, run: x%s}]\n"
	c, _ := mustParse(t, fmt.Sprintf(src, "")).Canonical()
	const want = `{"apiVersion":"agentsandbox.dev/v1","kind":"Workflow","name":"b","inputs":[],"steps":[{"name":"s","run":"x","packages":[],"env":{},"needs":[],"inputs":[],"outputs":[],` +
		`"resources":{"vcpu":1,"memory":536870912,"pids":256,"disk":1073741824,"timeoutMs":0,"bandwidth":0},"network":{"allow":[]},"isolation":"auto","hypervisor":"qemu"}]}`
	if string(c) != want {
		t.Errorf("canonical form without IO rates:\n got %s\nwant %s", c, want)
	}
	if h := mustParse(t, fmt.Sprintf(src, ", resources: {ioRead: unlimited, ioWrite: unlimited}")).Hash(); h != HashOf([]byte(want)) {
		t.Errorf("unlimited IO rates change the hash")
	}
	c, _ = mustParse(t, fmt.Sprintf(src, ", resources: {ioRead: 1GiB/s, ioWrite: 50MB/s}")).Canonical()
	if !strings.Contains(string(c), `"bandwidth":0,"ioReadBps":1073741824,"ioWriteBps":50000000}`) {
		t.Errorf("canonical form with IO rates: %s", c)
	}
}

// TestCanonicalDiskInodes: the inode budget appears in the canonical form
// only when set, so a workflow without it keeps its hash; defaults pass it
// on like the other resources.
func TestCanonicalDiskInodes(t *testing.T) {
	const src = "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: b\n%ssteps: [{name: s, run: x%s}, {name: t, run: y}]\n"
	plain := mustParse(t, fmt.Sprintf(src, "", ""))
	c, _ := plain.Canonical()
	if strings.Contains(string(c), "diskInodes") {
		t.Errorf("canonical form without diskInodes names it: %s", c)
	}
	w := mustParse(t, fmt.Sprintf(src, "defaults: {resources: {diskInodes: 200000}}\n", ", resources: {diskInodes: 4096}"))
	c, _ = w.Canonical()
	if !strings.Contains(string(c), `"bandwidth":0,"diskInodes":4096}`) {
		t.Errorf("canonical form with diskInodes: %s", c)
	}
	s, _ := w.StepByName("s")
	u, _ := w.StepByName("t")
	if s.Resources.DiskInodes != 4096 || u.Resources.DiskInodes != 200000 {
		t.Errorf("diskInodes: step s %d (want 4096), step t %d (want the default 200000)", s.Resources.DiskInodes, u.Resources.DiskInodes)
	}
	if w.Hash() == plain.Hash() {
		t.Error("diskInodes does not change the hash")
	}
}

// TestCanonicalDeterministic: deterministic appears in the canonical form
// only when set, so workflows without it keep their hashes; the list form
// is sorted and unique, and each form changes the hash.
func TestCanonicalDeterministic(t *testing.T) {
	const src = "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: b\nsteps: [{name: s, run: x, outputs: [b, a]%s}]\n"
	plain := mustParse(t, fmt.Sprintf(src, ""))
	c, _ := plain.Canonical()
	if strings.Contains(string(c), "deterministic") {
		t.Errorf("canonical form without deterministic names it: %s", c)
	}
	if h := mustParse(t, fmt.Sprintf(src, ", deterministic: false")).Hash(); h != plain.Hash() {
		t.Error("deterministic: false changes the hash")
	}
	all := mustParse(t, fmt.Sprintf(src, ", deterministic: true"))
	c, _ = all.Canonical()
	if !strings.HasSuffix(string(c), `"isolation":"auto","hypervisor":"qemu","deterministic":true}]}`) {
		t.Errorf("canonical form with deterministic: true: %s", c)
	}
	some := mustParse(t, fmt.Sprintf(src, ", deterministic: [./b, b]"))
	c, _ = some.Canonical()
	if !strings.HasSuffix(string(c), `"deterministic":true,"deterministicOutputs":["b"]}]}`) {
		t.Errorf("canonical form with deterministic: [b]: %s", c)
	}
	if all.Hash() == plain.Hash() || some.Hash() == all.Hash() {
		t.Error("deterministic does not change the hash")
	}
	for _, c := range []struct {
		w        *Workflow
		out      string
		expected bool
	}{{plain, "a", false}, {all, "a", true}, {all, "b", true}, {some, "a", false}, {some, "b", true}} {
		if got := c.w.Steps[0].OutputDeterministic(c.out); got != c.expected {
			t.Errorf("OutputDeterministic(%q) of %v/%v = %v", c.out, c.w.Steps[0].Deterministic, c.w.Steps[0].DeterministicOutputs, got)
		}
	}
}
