package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/workflow"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/format"
)

const (
	commit = "0123456789abcdef0123456789abcdef01234567"
	sha    = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// okWorkflow passes the default policy with no message on vmHost.
func okWorkflow() *workflow.Workflow {
	res := workflow.Resources{VCPU: 2, Memory: 2 << 30, PIDs: 512, Disk: 1 << 30, TimeoutMS: 600_000, Bandwidth: 100_000_000}
	return &workflow.Workflow{
		APIVersion: workflow.APIVersion,
		Kind:       workflow.Kind,
		Name:       "demo",
		Nixpkgs:    &workflow.Nixpkgs{Ref: "github:NixOS/nixpkgs/" + commit, Rev: commit},
		Inputs: []workflow.Input{
			{Name: "data", Kind: workflow.InputHTTP, Source: "https://example.com/d.tar.gz", SHA256: sha, Dest: "data"},
			{Name: "repo", Kind: workflow.InputGit, Source: "git::https://example.com/r.git", Commit: commit, Dest: "repo"},
		},
		Steps: []workflow.Step{
			{
				Name: "build", Run: "make", Packages: []string{"gnumake"}, Env: map[string]string{},
				Needs: []string{}, Inputs: []string{"repo"}, Outputs: []string{"out"},
				Resources: res, Network: workflow.Network{Allow: []string{"cache.nixos.org:443"}},
				Isolation: workflow.IsolationVM, Hypervisor: workflow.HypervisorQEMU,
			},
			{
				Name: "test", Run: "make test", Packages: []string{}, Env: map[string]string{},
				Needs: []string{"build"}, Inputs: []string{}, Outputs: []string{},
				Resources: res, Network: workflow.Network{Allow: []string{}},
				Isolation: workflow.IsolationAuto, Hypervisor: workflow.HypervisorQEMU,
			},
		},
	}
}

var vmHost = Host{Isolation: []string{"namespace", "vm"}, Hypervisors: []string{"qemu"}, KVM: true, Nix: true, UID: 1000}

var nsHost = Host{Isolation: []string{"namespace"}, Hypervisors: []string{}, KVM: false, Nix: false, UID: 1000}

func load(t testing.TB, opts Options) *Engine {
	t.Helper()
	e, err := Load(context.Background(), opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return e
}

func eval(t testing.TB, e *Engine, w *workflow.Workflow, h Host) *Decision {
	t.Helper()
	d, err := e.Eval(context.Background(), w, h)
	if err != nil {
		t.Fatalf("Eval: %v", err)
	}
	return d
}

func writeFile(t testing.TB, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDefaultPolicyAllowsPinnedWorkflow(t *testing.T) {
	e := load(t, Options{})
	d := eval(t, e, okWorkflow(), vmHost)
	if !d.Allowed() || len(d.Warn) != 0 {
		t.Fatalf("deny=%q warn=%q, want none", d.Deny, d.Warn)
	}
	if !slices.Equal(d.Policies, []string{DefaultPolicyName}) {
		t.Errorf("Policies = %q", d.Policies)
	}
}

// TestDefaultRules checks each default rule with a workflow it denies (or
// warns about) and a close one it lets through.
func TestDefaultRules(t *testing.T) {
	e := load(t, Options{})
	type tc struct {
		name   string
		host   Host
		edit   func(w *workflow.Workflow)
		deny   []string
		warn   []string
		allows bool // the edit is the allowed counterpart: no message at all
	}
	step := func(w *workflow.Workflow, name string) *workflow.Step {
		for i := range w.Steps {
			if w.Steps[i].Name == name {
				return &w.Steps[i]
			}
		}
		panic(name)
	}
	cases := []tc{
		{name: "egress ipv4 any", edit: func(w *workflow.Workflow) { step(w, "build").Network.Allow = []string{"0.0.0.0/0:443"} },
			deny: []string{`step "build": network.allow "0.0.0.0/0:443" opens all egress; list the hosts or prefixes the step needs`}},
		{name: "egress ipv6 any", edit: func(w *workflow.Workflow) { step(w, "build").Network.Allow = []string{"[::/0]:443"} },
			deny: []string{`step "build": network.allow "[::/0]:443" opens all egress; list the hosts or prefixes the step needs`}},
		{name: "egress star", edit: func(w *workflow.Workflow) { step(w, "build").Network.Allow = []string{"*"} },
			deny: []string{`step "build": network.allow "*" opens all egress; list the hosts or prefixes the step needs`}},
		{name: "egress narrow prefix", allows: true, edit: func(w *workflow.Workflow) {
			step(w, "build").Network.Allow = []string{"203.0.113.0/24:443", "[2001:db8::/32]:443", "*.example.com:443"}
		}},
		{name: "egress private prefix", edit: func(w *workflow.Workflow) { step(w, "build").Network.Allow = []string{"10.1.0.0/16:443"} },
			deny: []string{`step "build": network.allow "10.1.0.0/16:443" is inside 10.0.0.0/8, a private address; internal destinations are opened only by the operator's policy data (data.agentsandbox.egress_internal), never by a workflow or an API client: remove the entry, or ask the operator to open it`}},
		{name: "egress without port", edit: func(w *workflow.Workflow) { step(w, "build").Network.Allow = []string{"example.com"} },
			deny: []string{`step "build": network.allow "example.com" has no port; allow one port per entry, such as "example.com:443"`}},
		{name: "egress ipv6 without port", edit: func(w *workflow.Workflow) { step(w, "build").Network.Allow = []string{"2001:db8::1"} },
			deny: []string{`step "build": network.allow "2001:db8::1" has no port; allow one port per entry, such as "2001:db8::1:443"`}},
		{name: "egress with port", allows: true, edit: func(w *workflow.Workflow) {
			step(w, "build").Network.Allow = []string{"[2001:db8::1]:22", "example.com:80"}
		}},
		{name: "nixpkgs branch", edit: func(w *workflow.Workflow) { w.Nixpkgs = &workflow.Nixpkgs{Ref: "github:NixOS/nixpkgs/nixos-24.05"} },
			deny: []string{`nixpkgs.ref "github:NixOS/nixpkgs/nixos-24.05" is not pinned to a full 40-hex commit; use a ref such as "github:NixOS/nixpkgs/<commit>"`}},
		{name: "nixpkgs short commit", edit: func(w *workflow.Workflow) {
			w.Nixpkgs = &workflow.Nixpkgs{Ref: "github:NixOS/nixpkgs/0123456", Rev: "0123456"}
		}, deny: []string{`nixpkgs.ref "github:NixOS/nixpkgs/0123456" is not pinned to a full 40-hex commit; use a ref such as "github:NixOS/nixpkgs/<commit>"`}},
		{name: "nixpkgs rev query", allows: true, edit: func(w *workflow.Workflow) {
			w.Nixpkgs = &workflow.Nixpkgs{Ref: "github:NixOS/nixpkgs?rev=" + commit, Rev: commit}
		}},
		{name: "no nixpkgs", allows: true, edit: func(w *workflow.Workflow) { w.Nixpkgs = nil }},
		{name: "http input without sha256", edit: func(w *workflow.Workflow) { w.Inputs[0].SHA256 = "" },
			deny: []string{`input "data": sha256 is missing; pin http inputs by the sha256 of their content`}},
		{name: "file input without sha256", edit: func(w *workflow.Workflow) {
			w.Inputs[0] = workflow.Input{Name: "data", Kind: workflow.InputFile, Source: "./d.csv", Dest: "data"}
		}, deny: []string{`input "data": sha256 is missing; pin file inputs by the sha256 of their content`}},
		{name: "file input with sha256", allows: true, edit: func(w *workflow.Workflow) {
			w.Inputs[0] = workflow.Input{Name: "data", Kind: workflow.InputFile, Source: "./d.csv", SHA256: sha, Dest: "data"}
		}},
		{name: "git input without commit", edit: func(w *workflow.Workflow) { w.Inputs[1].Commit = "" },
			deny: []string{`input "repo": commit is missing or not a full 40-hex commit; pin git inputs by commit`}},
		{name: "git input short commit", edit: func(w *workflow.Workflow) { w.Inputs[1].Commit = "abc123" },
			deny: []string{`input "repo": commit is missing or not a full 40-hex commit; pin git inputs by commit`}},
		{name: "vcpu above ceiling", edit: func(w *workflow.Workflow) { step(w, "build").Resources.VCPU = 17 },
			deny: []string{`step "build": resources.vcpu 17 is above the ceiling 16 (data.agentsandbox.ceilings.vcpu)`}},
		{name: "vcpu at ceiling", allows: true, edit: func(w *workflow.Workflow) { step(w, "build").Resources.VCPU = 16 }},
		{name: "memory above ceiling", edit: func(w *workflow.Workflow) { step(w, "build").Resources.Memory = 64<<30 + 1 },
			deny: []string{`step "build": resources.memory 68719476737 is above the ceiling 68719476736 (data.agentsandbox.ceilings.memory)`}},
		{name: "memory at ceiling", allows: true, edit: func(w *workflow.Workflow) { step(w, "build").Resources.Memory = 64 << 30 }},
		{name: "timeout above ceiling", edit: func(w *workflow.Workflow) { step(w, "build").Resources.TimeoutMS = 24*3600*1000 + 1 },
			deny: []string{`step "build": resources.timeoutMs 86400001 is above the ceiling 86400000 (data.agentsandbox.ceilings.timeoutMs)`}},
		{name: "timeout at ceiling", allows: true, edit: func(w *workflow.Workflow) { step(w, "build").Resources.TimeoutMS = 24 * 3600 * 1000 }},
		// The egress proxy enforces network.allow in both backends, so the
		// default policy admits it on a namespace step too
		// (TestEgressPolicyData: a team can require vm).
		{name: "namespace with egress", allows: true, edit: func(w *workflow.Workflow) { step(w, "build").Isolation = workflow.IsolationNamespace }},
		// The policy judges the resolved isolation (engine.Resolve): a vm
		// step is a vm whatever the host says, and an auto the runner never
		// resolved may still become a namespace jail.
		{name: "vm with egress on a host without kvm", host: nsHost, allows: true, edit: func(w *workflow.Workflow) {}},
		{name: "unresolved auto with egress on a kvm host", allows: true, edit: func(w *workflow.Workflow) { step(w, "build").Isolation = workflow.IsolationAuto }},
		{name: "namespace without egress", allows: true, edit: func(w *workflow.Workflow) { step(w, "test").Isolation = workflow.IsolationNamespace }},
		{name: "no timeout", edit: func(w *workflow.Workflow) { step(w, "test").Resources.TimeoutMS = 0 },
			warn: []string{`step "test": resources.timeoutMs is not set, so the step may run forever; set a timeout`}},
		{name: "needed without outputs", edit: func(w *workflow.Workflow) { step(w, "build").Outputs = []string{} },
			warn: []string{`step "build": outputs is empty but "test" needs it; declare the outputs the later steps use`}},
		{name: "not needed, no outputs", allows: true, edit: func(w *workflow.Workflow) {
			step(w, "build").Outputs = []string{}
			step(w, "test").Needs = []string{}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := okWorkflow()
			c.edit(w)
			h := c.host
			if h.Isolation == nil {
				h = vmHost
			}
			d := eval(t, e, w, h)
			if c.allows && (len(d.Deny) != 0 || len(d.Warn) != 0) {
				t.Fatalf("want no messages, got deny=%q warn=%q", d.Deny, d.Warn)
			}
			if !c.allows && (!slices.Equal(d.Deny, nonNil(c.deny)) || !slices.Equal(d.Warn, nonNil(c.warn))) {
				t.Fatalf("got\n deny=%q\n warn=%q\nwant\n deny=%q\n warn=%q", d.Deny, d.Warn, c.deny, c.warn)
			}
		})
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func TestPolicyDataChangesThresholds(t *testing.T) {
	dir := t.TempDir()
	data := writeFile(t, filepath.Join(dir, "team.yaml"), `
agentsandbox:
  ceilings:
    vcpu: 32
    pids: 256
  allow_namespace_egress: true
  warn_no_timeout: false
`)
	e := load(t, Options{DataFiles: []string{data}})
	w := okWorkflow()
	w.Steps[0].Resources.VCPU = 32         // allowed by the raised ceiling
	w.Steps[0].Resources.Memory = 65 << 30 // still denied: memory default kept under the merge
	w.Steps[0].Isolation = workflow.IsolationNamespace
	w.Steps[1].Resources.TimeoutMS = 0
	d := eval(t, e, w, vmHost)
	want := []string{
		`step "build": resources.memory 69793218560 is above the ceiling 68719476736 (data.agentsandbox.ceilings.memory)`,
		`step "build": resources.pids 512 is above the ceiling 256 (data.agentsandbox.ceilings.pids)`,
		`step "test": resources.pids 512 is above the ceiling 256 (data.agentsandbox.ceilings.pids)`,
	}
	if !slices.Equal(d.Deny, want) || len(d.Warn) != 0 {
		t.Fatalf("deny=%q warn=%q\nwant deny=%q", d.Deny, d.Warn, want)
	}
}

// TestIOCeilings: a team caps the disk IO rates by field name, in bytes per
// second or spelled like the workflow; a step that leaves a capped rate
// unlimited is above the ceiling.
func TestIOCeilings(t *testing.T) {
	dir := t.TempDir()
	data := writeFile(t, filepath.Join(dir, "team.yaml"), `
agentsandbox:
  ceilings:
    ioWriteBps: 100MiB/s
    ioReadBps: 200000000
`)
	e := load(t, Options{DataFiles: []string{data}})
	w := okWorkflow()
	w.Steps[0].Resources.IOWriteBps = 100<<20 + 1 // above
	w.Steps[0].Resources.IOReadBps = 200e6        // at the ceiling
	w.Steps[1].Resources.IOWriteBps = 100 << 20   // at the ceiling; read left unlimited
	d := eval(t, e, w, vmHost)
	want := []string{
		`step "build": resources.ioWriteBps 104857601 is above the ceiling 104857600 (data.agentsandbox.ceilings.ioWriteBps)`,
		`step "test": resources.ioReadBps is unlimited, above the ceiling 200000000 (data.agentsandbox.ceilings.ioReadBps); set resources.ioRead`,
	}
	if !slices.Equal(d.Deny, want) {
		t.Fatalf("deny=%q\nwant deny=%q", d.Deny, want)
	}
	w.Steps[0].Resources.IOWriteBps = 50e6
	w.Steps[1].Resources.IOReadBps = 1 << 20
	if d := eval(t, e, w, vmHost); len(d.Deny) != 0 {
		t.Fatalf("deny=%q, want none: every rate at or under its ceiling", d.Deny)
	}
	// Without IO ceilings (the default data), unlimited rates are fine.
	if d := eval(t, load(t, Options{}), okWorkflow(), vmHost); len(d.Deny) != 0 {
		t.Fatalf("default policy denies unlimited IO: %q", d.Deny)
	}
}

// TestBandwidthCeilingDeniesUnlimitedEgress: with a bandwidth ceiling, a
// step with egress must set a bandwidth; a step without egress need not.
func TestBandwidthCeilingDeniesUnlimitedEgress(t *testing.T) {
	dir := t.TempDir()
	data := writeFile(t, filepath.Join(dir, "team.yaml"), "agentsandbox:\n  ceilings:\n    bandwidth: 100Mbit\n")
	e := load(t, Options{DataFiles: []string{data}})
	w := okWorkflow()
	w.Steps[0].Network.Allow = []string{"203.0.113.0/24:443"}
	w.Steps[0].Resources.Bandwidth = 0
	w.Steps[1].Network.Allow = nil
	w.Steps[1].Resources.Bandwidth = 0
	d := eval(t, e, w, vmHost)
	want := []string{`step "build": resources.bandwidth is unlimited, above the ceiling 100000000 (data.agentsandbox.ceilings.bandwidth); set resources.bandwidth`}
	if !slices.Equal(d.Deny, want) {
		t.Fatalf("deny=%q\nwant deny=%q", d.Deny, want)
	}
	w.Steps[0].Resources.Bandwidth = 50e6
	if d := eval(t, e, w, vmHost); len(d.Deny) != 0 {
		t.Fatalf("deny=%q, want none", d.Deny)
	}
	w.Steps[0].Resources.Bandwidth = 100e6 + 1
	if d := eval(t, e, w, vmHost); len(d.Deny) != 1 || !strings.Contains(d.Deny[0], "above the ceiling 100000000") {
		t.Fatalf("deny=%q, want the bandwidth above the 100Mbit ceiling", d.Deny)
	}
}

func TestPolicyDataJSONAndOrder(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, filepath.Join(dir, "a.json"), `{"agentsandbox": {"ceilings": {"vcpu": 1}}}`)
	b := writeFile(t, filepath.Join(dir, "b.yml"), "agentsandbox:\n  ceilings:\n    vcpu: 2\n")
	e := load(t, Options{DataFiles: []string{a, b}}) // later files win
	d := eval(t, e, okWorkflow(), vmHost)
	if len(d.Deny) != 0 {
		t.Fatalf("deny=%q, want none (vcpu 2 under ceiling 2)", d.Deny)
	}
	e = load(t, Options{DataFiles: []string{b, a}})
	d = eval(t, e, okWorkflow(), vmHost)
	if len(d.Deny) != 2 {
		t.Fatalf("deny=%q, want both steps above ceiling 1", d.Deny)
	}
}

func TestUserPolicyDenies(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "team.rego"), `package agentsandbox.team

deny contains msg if {
	some step in input.workflow.steps
	step.isolation != "vm"
	msg := sprintf("step %q: isolation %s; team rule: every step runs in a vm", [step.name, step.isolation])
}
`)
	// A test file next to it is not part of the policy.
	writeFile(t, filepath.Join(dir, "team_test.rego"), "package agentsandbox.team\n\ntest_x if { false }\n")
	e := load(t, Options{Dirs: []string{dir}})
	d := eval(t, e, okWorkflow(), vmHost)
	want := []string{`step "test": isolation auto; team rule: every step runs in a vm`}
	if !slices.Equal(d.Deny, want) {
		t.Fatalf("deny=%q, want %q", d.Deny, want)
	}
	if !slices.Equal(d.Policies, []string{DefaultPolicyName, "team.rego"}) {
		t.Errorf("Policies = %q", d.Policies)
	}

	// The same rule in package agentsandbox itself joins the default's deny.
	dir2 := t.TempDir()
	writeFile(t, filepath.Join(dir2, "sub", "team.rego"), `package agentsandbox

deny contains {"msg": sprintf("workflow %q: team rule: name must start with team-", [input.workflow.name])} if {
	not startswith(input.workflow.name, "team-")
}
`)
	d = eval(t, load(t, Options{Dirs: []string{dir2}}), okWorkflow(), vmHost)
	want = []string{`workflow "demo": team rule: name must start with team-`}
	if !slices.Equal(d.Deny, want) {
		t.Fatalf("deny=%q, want %q", d.Deny, want)
	}
}

func TestNoDefaultPolicy(t *testing.T) {
	w := okWorkflow()
	w.Steps[0].Network.Allow = []string{"*"}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "p.rego"), "package agentsandbox\n\nwarn contains \"always\" if { true }\n")
	d := eval(t, load(t, Options{Dirs: []string{dir}, NoDefault: true}), w, vmHost)
	if len(d.Deny) != 0 || !slices.Equal(d.Warn, []string{"always"}) {
		t.Fatalf("deny=%q warn=%q", d.Deny, d.Warn)
	}
	_, err := Load(context.Background(), Options{NoDefault: true})
	var se *SourceError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "no deny or warn rule") {
		t.Fatalf("Load with nothing: %v", err)
	}
}

func TestSyntaxErrorHasFileRowCol(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, filepath.Join(dir, "bad.rego"), "package agentsandbox.team\n\ndeny contains msg if {\n\tmsg := \"x\" +\n}\n")
	_, err := Load(context.Background(), Options{Dirs: []string{dir}})
	var se *SourceError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v (%T), want *SourceError", err, err)
	}
	want := []string{file + ":5:1: unexpected } token"}
	if !slices.Equal(se.Problems, want) {
		t.Fatalf("problems = %q, want %q", se.Problems, want)
	}
	if got := err.Error(); got != "policy: "+want[0] {
		t.Errorf("Error() = %q", got)
	}
}

func TestCompileErrorHasFileRowCol(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, filepath.Join(dir, "undefined.rego"), "package agentsandbox.other\n\ndeny contains msg if {\n\tmsg := no_such_func(1)\n}\n")
	_, err := Load(context.Background(), Options{Dirs: []string{dir}})
	var se *SourceError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v (%T), want *SourceError", err, err)
	}
	want := file + ":4:9: undefined function no_such_func"
	if !slices.Equal(se.Problems, []string{want}) {
		t.Fatalf("problems = %q, want %q", se.Problems, want)
	}
}

func TestNondeterministicBuiltinsRejected(t *testing.T) {
	for _, call := range []string{
		`http.send({"method": "get", "url": "http://127.0.0.1:1/"})`,
		`time.now_ns()`,
		`net.lookup_ip_addr("localhost")`,
		`opa.runtime()`,
		`rand.intn("x", 10)`,
		`uuid.rfc4122("x")`,
		`crypto.x509.parse_and_verify_certificates("x")`,
	} {
		name := call[:strings.IndexByte(call, '(')]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			file := writeFile(t, filepath.Join(dir, "p.rego"), "package agentsandbox.team\n\ndeny contains msg if {\n\tx := "+call+"\n\tmsg := sprintf(\"%v\", [x])\n}\n")
			_, err := Load(context.Background(), Options{Dirs: []string{dir}})
			var se *SourceError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want *SourceError", err)
			}
			want := file + ":4:7: undefined function " + name + " (disabled: policy evaluation has no network, clock or random builtins, so the same workflow and policy always give the same decision)"
			if !slices.Contains(se.Problems, want) {
				t.Fatalf("problems = %q\nwant %q", se.Problems, want)
			}
		})
	}
}

func TestDataFileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := writeFile(t, filepath.Join(dir, "bad.yaml"), "agentsandbox: [\n")
	list := writeFile(t, filepath.Join(dir, "list.json"), "[1, 2]")
	missing := filepath.Join(dir, "missing.yaml")
	_, err := Load(context.Background(), Options{DataFiles: []string{bad, list, missing}, Dirs: []string{filepath.Join(dir, "nodir")}})
	var se *SourceError
	if !errors.As(err, &se) || len(se.Problems) != 4 {
		t.Fatalf("err = %v, want 4 problems", err)
	}
	for i, prefix := range []string{filepath.Join(dir, "nodir") + ": policy folder: no such file", bad + ": decode policy data: yaml: line", list + ": policy data must be an object", missing + ": read policy data: no such file"} {
		if !strings.HasPrefix(se.Problems[i], prefix) {
			t.Errorf("problem %d = %q, want prefix %q", i, se.Problems[i], prefix)
		}
	}
}

func TestEvalErrorIsSourceError(t *testing.T) {
	dir := t.TempDir()
	data := writeFile(t, filepath.Join(dir, "d.yaml"), "agentsandbox:\n  ceilings:\n    memory: lots\n")
	e := load(t, Options{DataFiles: []string{data}})
	_, err := e.Eval(context.Background(), okWorkflow(), vmHost)
	var se *SourceError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "units.parse_bytes") {
		t.Fatalf("err = %v, want a *SourceError naming units.parse_bytes", err)
	}
}

// TestDigests checks the bundle digest is stable across loads and changes
// with any edit of a policy file, a file name or the data; the input digest
// changes with the workflow and host, not with step order.
func TestDigests(t *testing.T) {
	dir := t.TempDir()
	pol := writeFile(t, filepath.Join(dir, "team.rego"), "package agentsandbox.team\n\ndeny contains \"no\" if { input.workflow.name == \"bad\" }\n")
	data := writeFile(t, filepath.Join(dir, "d.yaml"), "agentsandbox:\n  ceilings:\n    vcpu: 8\n")
	opts := Options{Dirs: []string{dir}, DataFiles: []string{data}}
	d1 := eval(t, load(t, opts), okWorkflow(), vmHost)
	d2 := eval(t, load(t, opts), okWorkflow(), vmHost)
	if d1.ID != d2.ID || d1.BundleDigest != d2.BundleDigest || d1.InputDigest != d2.InputDigest {
		t.Fatalf("digests differ across loads: %+v %+v", d1, d2)
	}
	if d1.ID != decisionID(d1.BundleDigest, d1.InputDigest) || d1.BundleDigest == d1.InputDigest {
		t.Fatal("decision id is not derived from the two digests")
	}

	// The same folder elsewhere gives the same bundle digest.
	moved := t.TempDir()
	writeFile(t, filepath.Join(moved, "team.rego"), mustRead(t, pol))
	movedData := writeFile(t, filepath.Join(moved, "d.yaml"), mustRead(t, data))
	if got := load(t, Options{Dirs: []string{moved}, DataFiles: []string{movedData}}).BundleDigest(); got != d1.BundleDigest {
		t.Errorf("moving the policy folder changed the bundle digest")
	}

	seen := map[Digest]string{d1.BundleDigest: "original"}
	change := func(what string, opts Options) {
		t.Helper()
		got := load(t, opts).BundleDigest()
		if prev, ok := seen[got]; ok {
			t.Errorf("%s: bundle digest equals that of %s", what, prev)
		}
		seen[got] = what
	}
	writeFile(t, pol, mustRead(t, pol)+"\n")
	change("policy whitespace edit", opts)
	writeFile(t, data, "agentsandbox:\n  ceilings:\n    vcpu: 9\n")
	change("data edit", opts)
	if err := os.Rename(pol, filepath.Join(dir, "renamed.rego")); err != nil {
		t.Fatal(err)
	}
	change("policy rename", opts)
	change("no default policy", Options{Dirs: opts.Dirs, DataFiles: opts.DataFiles, NoDefault: true})
	change("no data file", Options{Dirs: opts.Dirs})

	// Input digest: step order does not matter (canonical form sorts).
	w := okWorkflow()
	slices.Reverse(w.Steps)
	e := load(t, Options{})
	base := eval(t, e, okWorkflow(), vmHost)
	if got := eval(t, e, w, vmHost); got.InputDigest != base.InputDigest {
		t.Error("step order changed the input digest")
	}
	h := vmHost
	h.Hypervisors = []string{"qemu", "qemu"}
	if got := eval(t, e, okWorkflow(), h); got.InputDigest != base.InputDigest {
		t.Error("duplicate host facts changed the input digest")
	}
	h.UID = 0
	if got := eval(t, e, okWorkflow(), h); got.InputDigest == base.InputDigest || got.ID == base.ID {
		t.Error("host uid did not change the input digest")
	}
	w = okWorkflow()
	w.Steps[0].Env = map[string]string{"A": "1"}
	if got := eval(t, e, w, vmHost); got.InputDigest == base.InputDigest {
		t.Error("workflow edit did not change the input digest")
	}
}

func mustRead(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDeterminism(t *testing.T) {
	e := load(t, Options{})
	w := generated(40)
	w.Steps[3].Network.Allow = []string{"*", "example.com"}
	w.Steps[7].Resources.VCPU = 99
	var first []byte
	for i := range 20 {
		d := eval(t, e, w, nsHost)
		d.EvalTime = 0
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = b
		} else if string(b) != string(first) {
			t.Fatalf("evaluation %d differs:\n%s\n%s", i, b, first)
		}
	}
}

func TestDecisionJSON(t *testing.T) {
	d := eval(t, load(t, Options{}), okWorkflow(), vmHost)
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back Decision
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.ID != d.ID || back.BundleDigest != d.BundleDigest || back.InputDigest != d.InputDigest || back.Deny == nil || back.Warn == nil {
		t.Fatalf("round trip: %s -> %+v", b, back)
	}
	if !strings.Contains(string(b), `"deny":[]`) || !strings.HasPrefix(string(b), `{"id":"sha256:`) {
		t.Errorf("JSON = %s", b)
	}
}

func TestDeniedError(t *testing.T) {
	w := okWorkflow()
	w.Steps[0].Network.Allow = []string{"*", "example.com"}
	d := eval(t, load(t, Options{}), w, vmHost)
	msg := (&DeniedError{Decision: d}).Error()
	for _, m := range d.Deny {
		if !strings.Contains(msg, "\n  deny: "+m) {
			t.Errorf("DeniedError misses %q:\n%s", m, msg)
		}
	}
	if len(d.Deny) != 2 {
		t.Errorf("deny = %q, want 2", d.Deny)
	}
}

func TestParseDigest(t *testing.T) {
	d := eval(t, load(t, Options{}), okWorkflow(), vmHost)
	back, err := ParseDigest(d.ID.String())
	if err != nil || back != d.ID {
		t.Fatalf("ParseDigest(%s) = %v, %v", d.ID, back, err)
	}
	for _, bad := range []string{"", "sha256:", "md5:00", d.ID.String()[:20], "sha256:" + strings.Repeat("z", 64)} {
		if _, err := ParseDigest(bad); err == nil {
			t.Errorf("ParseDigest(%q) accepted", bad)
		}
	}
}

func TestWorkflowPolicyDir(t *testing.T) {
	if got, want := WorkflowPolicyDir("ci/build.yaml"), filepath.Join("ci", ".agentsandbox", "policy"); got != want {
		t.Errorf("got %q want %q", got, want)
	}
	if got, want := WorkflowPolicyDir("build.yaml"), filepath.Join(".agentsandbox", "policy"); got != want {
		t.Errorf("got %q want %q", got, want)
	}
}

// generated returns a valid n-step workflow: a chain of steps, each needing
// the one before and declaring an output.
func generated(n int) *workflow.Workflow {
	w := okWorkflow()
	tmpl := w.Steps[0]
	w.Steps = nil
	for i := range n {
		s := tmpl
		s.Name = fmt.Sprintf("step-%03d", i)
		s.Needs = []string{}
		if i > 0 {
			s.Needs = []string{w.Steps[i-1].Name}
		}
		s.Outputs = []string{"out/" + s.Name}
		s.Network.Allow = []string{"cache.nixos.org:443", "[2001:db8::1]:443"}
		w.Steps = append(w.Steps, s)
	}
	return w
}

func TestTestRunsRegoTests(t *testing.T) {
	var out strings.Builder
	sum, err := Test(context.Background(), Options{Dirs: []string{"testdata/team"}}, &out, true)
	if err != nil {
		t.Fatalf("Test: %v\n%s", err, out.String())
	}
	if sum != (TestSummary{Passed: 4}) || !sum.OK() {
		t.Fatalf("summary = %+v\n%s", sum, out.String())
	}
	for _, want := range []string{"testdata/team/team_test.rego:", "data.agentsandbox.team_test.test_unlisted_host_denied: PASS", "PASS: 4/4"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report misses %q:\n%s", want, out.String())
		}
	}

	// The team policy is a normal policy folder for Load too.
	w := okWorkflow()
	d := eval(t, load(t, Options{Dirs: []string{"testdata/team"}}), w, nsHost)
	if !slices.Equal(d.Warn, []string{"host: no KVM, so isolation auto runs steps in namespaces"}) || len(d.Deny) != 0 {
		t.Fatalf("deny=%q warn=%q", d.Deny, d.Warn)
	}
}

func TestTestReportsFailures(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "p.rego"), "package agentsandbox.x\n\ndeny contains \"x\" if { input.bad }\n")
	writeFile(t, filepath.Join(dir, "p_test.rego"), "package agentsandbox.x_test\n\nimport data.agentsandbox.x\n\ntest_ok if { count(x.deny) == 0 with input as {} }\n\ntest_wrong if {\n\tprint(\"checking\")\n\tcount(x.deny) == 0 with input as {\"bad\": true}\n}\n")
	var out strings.Builder
	sum, err := Test(context.Background(), Options{Dirs: []string{dir}, NoDefault: true}, &out, false)
	if err != nil {
		t.Fatalf("Test: %v", err)
	}
	if sum != (TestSummary{Passed: 1, Failed: 1}) || sum.OK() {
		t.Fatalf("summary = %+v\n%s", sum, out.String())
	}
	for _, want := range []string{"data.agentsandbox.x_test.test_wrong: FAIL", "checking", "PASS: 1/2", "FAIL: 1/2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report misses %q:\n%s", want, out.String())
		}
	}
}

func TestTestSourceErrors(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, filepath.Join(dir, "p_test.rego"), "package x_test\n\ntest_a if { time.now_ns() > 0 }\n")
	_, err := Test(context.Background(), Options{Dirs: []string{dir}}, io.Discard, false)
	var se *SourceError
	if !errors.As(err, &se) || !strings.HasPrefix(se.Problems[0], file+":3:13: undefined function time.now_ns (disabled") {
		t.Fatalf("err = %v", err)
	}
	empty := t.TempDir()
	writeFile(t, filepath.Join(empty, "p.rego"), "package agentsandbox.y\n")
	if _, err := Test(context.Background(), Options{Dirs: []string{empty}}, io.Discard, false); !errors.As(err, &se) || !strings.Contains(err.Error(), "no *_test.rego files") {
		t.Fatalf("no tests: err = %v", err)
	}
}

// TestRegoFormatted keeps the shipped rego in `opa fmt` form.
func TestRegoFormatted(t *testing.T) {
	files := []string{"default.rego", "testdata/team/team.rego", "testdata/team/team_test.rego"}
	for _, f := range files {
		src := []byte(mustRead(t, f))
		got, err := format.SourceWithOpts(f, src, format.Opts{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if string(got) != string(src) {
			t.Errorf("%s is not formatted like opa fmt; want:\n%s", f, got)
		}
	}
}

func TestConcurrentEval(t *testing.T) {
	e := load(t, Options{})
	w := generated(10)
	w.Steps[2].Network.Allow = []string{"*"}
	want := eval(t, e, w, vmHost)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			d, err := e.Eval(context.Background(), w, vmHost)
			if err == nil && (d.ID != want.ID || !slices.Equal(d.Deny, want.Deny)) {
				err = fmt.Errorf("decision differs: %+v", d)
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestInputDocumentHostShape(t *testing.T) {
	in, err := InputDocument(okWorkflow(), Host{UID: 7})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(in), `,"host":{"isolation":[],"hypervisors":[],"kvm":false,"nix":false,"uid":7}}`) || !strings.HasPrefix(string(in), `{"workflow":{"apiVersion":`) {
		t.Fatalf("input = %s", in)
	}
}

// TestEgressPolicyData covers the team's switches over egress: requiring
// vm isolation for it, and forbidding destinations whatever a step asks
// (which also reach every step's proxy through Decision.EgressDeny).
func TestEgressPolicyData(t *testing.T) {
	dir := t.TempDir()
	data := writeFile(t, filepath.Join(dir, "data.json"), `{"agentsandbox": {
		"allow_namespace_egress": false,
		"egress_deny": ["*.internal.example.com", "10.0.0.0/8", "db.example.com:5432", "2001:db8:bad::/48"]}}`)
	e := load(t, Options{DataFiles: []string{data}})
	cases := []struct {
		name      string
		isolation workflow.Isolation
		allow     []string
		deny      []string
	}{
		{"vm, allowed entries", workflow.IsolationVM, []string{"api.example.com:443", "192.0.2.0/24:443"}, nil},
		{"namespace needs vm", workflow.IsolationNamespace, []string{"api.example.com:443"},
			[]string{`step "build": network.allow gives egress to a step under isolation namespace, and this policy requires vm isolation for egress (data.agentsandbox.allow_namespace_egress is false); set isolation: vm`}},
		{"name below a forbidden domain", workflow.IsolationVM, []string{"git.internal.example.com:443"},
			[]string{`step "build": network.allow "git.internal.example.com:443" reaches "*.internal.example.com", which the policy forbids (data.agentsandbox.egress_deny); remove the entry`}},
		{"wildcard of a forbidden domain", workflow.IsolationVM, []string{"*.internal.example.com:443"},
			[]string{`step "build": network.allow "*.internal.example.com:443" reaches "*.internal.example.com", which the policy forbids (data.agentsandbox.egress_deny); remove the entry`}},
		{"prefix overlapping a forbidden one", workflow.IsolationVM, []string{"10.1.0.0/16:443"},
			[]string{`step "build": network.allow "10.1.0.0/16:443" reaches "10.0.0.0/8", which the policy forbids (data.agentsandbox.egress_deny); remove the entry`}},
		{"address inside a forbidden prefix", workflow.IsolationVM, []string{"10.2.3.4:80"},
			[]string{`step "build": network.allow "10.2.3.4:80" reaches "10.0.0.0/8", which the policy forbids (data.agentsandbox.egress_deny); remove the entry`}},
		{"ipv6 inside a forbidden prefix", workflow.IsolationVM, []string{"[2001:db8:bad::1]:443"},
			[]string{`step "build": network.allow "[2001:db8:bad::1]:443" reaches "2001:db8:bad::/48", which the policy forbids (data.agentsandbox.egress_deny); remove the entry`}},
		{"forbidden port only", workflow.IsolationVM, []string{"db.example.com:443"}, nil},
		{"forbidden host and port", workflow.IsolationVM, []string{"db.example.com:5432"},
			[]string{`step "build": network.allow "db.example.com:5432" reaches "db.example.com:5432", which the policy forbids (data.agentsandbox.egress_deny); remove the entry`}},
		{"a sibling domain is not below it", workflow.IsolationVM, []string{"notinternal.example.com:443"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := okWorkflow()
			for i := range w.Steps {
				if w.Steps[i].Name == "build" {
					w.Steps[i].Isolation = c.isolation
					w.Steps[i].Network.Allow = c.allow
					w.Steps[i].Resources.Bandwidth = 100_000_000
				}
			}
			d := eval(t, e, w, vmHost)
			if fmt.Sprint(d.Deny) != fmt.Sprint(nonNilStrings(c.deny)) {
				t.Errorf("deny = %q\nwant   %q", d.Deny, c.deny)
			}
			want := []string{"*.internal.example.com", "10.0.0.0/8", "2001:db8:bad::/48", "db.example.com:5432"}
			if fmt.Sprint(d.EgressDeny) != fmt.Sprint(want) {
				t.Errorf("EgressDeny = %q, want %q", d.EgressDeny, want)
			}
		})
	}
	// Unlimited bandwidth with egress is above the default ceiling.
	w := okWorkflow()
	for i := range w.Steps {
		w.Steps[i].Isolation = workflow.IsolationVM
		w.Steps[i].Resources.Bandwidth = 0
	}
	d := eval(t, load(t, Options{}), w, vmHost)
	if want := `step "build": resources.bandwidth is unlimited, above the ceiling 1000000000 (data.agentsandbox.ceilings.bandwidth); set resources.bandwidth`; !slices.Contains(d.Deny, want) {
		t.Errorf("default policy, egress without bandwidth: deny = %q, want it to hold %q", d.Deny, want)
	}
	bad := writeFile(t, filepath.Join(dir, "bad.json"), `{"agentsandbox": {"egress_deny": ["*"]}}`)
	if _, err := Load(context.Background(), Options{DataFiles: []string{bad}}); err == nil || !strings.Contains(err.Error(), "egress_deny") {
		t.Errorf("Load with egress_deny [\"*\"]: err = %v, want one naming egress_deny", err)
	}
}

// TestEgressInternal: a network.allow entry naming only internal
// destinations (loopback, metadata, private ranges, IPv6 forms carrying
// them) is denied whatever the rego rules say, and only the operator's
// data.agentsandbox.egress_internal opens one.
func TestEgressInternal(t *testing.T) {
	step := func(w *workflow.Workflow, name string) *workflow.Step {
		for i := range w.Steps {
			if w.Steps[i].Name == name {
				return &w.Steps[i]
			}
		}
		panic(name)
	}
	msg := func(entry, what string) string {
		return fmt.Sprintf("step \"build\": network.allow %q %s; internal destinations are opened only by the operator's policy data (data.agentsandbox.egress_internal), never by a workflow or an API client: remove the entry, or ask the operator to open it", entry, what)
	}
	cases := []struct {
		entry string
		deny  string // "" when admitted; else what the message says of it
	}{
		{"127.0.0.1/32:8080", "is inside 127.0.0.0/8, a loopback address"},
		{"169.254.169.254/32:80", "is inside 169.254.0.0/16, a link-local address (cloud metadata services live here)"},
		{"10.0.0.0/8:5432", "is inside 10.0.0.0/8, a private address"},
		{"192.168.1.10:22", "is inside 192.168.0.0/16, a private address"},
		{"[fd00::/8]:443", "is inside fc00::/7, a unique local (private) address"},
		{"[::1]:80", "is inside ::1/128, the loopback address"},
		{"[2002:7f00::/24]:80", "carries (as 6to4) addresses inside 127.0.0.0/8, a loopback address"},
		{"[64:ff9b::a9fe:a9fe]:80", "carries (as NAT64) addresses inside 169.254.0.0/16, a link-local address (cloud metadata services live here)"},
		{"[::7f00:1]:80", "carries (as IPv4-compatible) addresses inside 127.0.0.0/8, a loopback address"},
		{"0.0.0.0/1:443", ""}, // holds internal addresses but public ones too: those alone are reached
		{"203.0.113.5:22", ""},
		{"api.example.com:443", ""},
	}
	def := load(t, Options{})
	for _, c := range cases {
		w := okWorkflow()
		step(w, "build").Network.Allow = []string{c.entry}
		d := eval(t, def, w, vmHost)
		want := []string{}
		if c.deny != "" {
			want = []string{msg(c.entry, c.deny)}
		}
		if !slices.Equal(d.Deny, want) {
			t.Errorf("%s: deny = %q\nwant   %q", c.entry, d.Deny, want)
		}
	}
	// A forbidden prefix is denied once, as forbidden; one forbidden on
	// another port only is still internal.
	fd := writeFile(t, filepath.Join(t.TempDir(), "deny.yaml"), "agentsandbox:\n  egress_deny: [\"10.0.0.0/8:22\"]\n")
	forbidding := load(t, Options{DataFiles: []string{fd}})
	for entry, want := range map[string]string{
		"10.1.2.3:22":   "which the policy forbids",
		"10.1.2.3:5432": "egress_internal",
	} {
		w := okWorkflow()
		step(w, "build").Network.Allow = []string{entry}
		if d := eval(t, forbidding, w, vmHost); len(d.Deny) != 1 || !strings.Contains(d.Deny[0], want) {
			t.Errorf("%s with 10.0.0.0/8:22 forbidden: deny = %q, want one saying %q", entry, d.Deny, want)
		}
	}

	// The same policy without the default rules: the check is not a rule
	// a policy can leave out.
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "p.rego"), "package agentsandbox\n\nwarn contains \"x\" if false\n")
	bare := load(t, Options{Dirs: []string{dir}, NoDefault: true})
	w := okWorkflow()
	step(w, "build").Network.Allow = []string{"169.254.169.254:80"}
	if d := eval(t, bare, w, vmHost); len(d.Deny) != 1 || !strings.Contains(d.Deny[0], "egress_internal") {
		t.Errorf("without the default policy: deny = %q", d.Deny)
	}

	// The operator opens them.
	data := writeFile(t, filepath.Join(dir, "open.yaml"), `agentsandbox:
  egress_internal: ["127.0.0.1:8080", "169.254.169.254:80", "10.0.0.0/8", "192.168.1.10:22", "[fd00::/8]:443", "[::1]:80"]
`)
	open := load(t, Options{DataFiles: []string{data}})
	for _, entry := range []string{"127.0.0.1/32:8080", "169.254.169.254/32:80", "10.0.0.0/8:5432", "10.20.0.0/16:443", "192.168.1.10:22", "[fd00::/8]:443", "[::1]:80", "[2002:7f00:1::/48]:8080", "[64:ff9b::a9fe:a9fe]:80"} {
		w := okWorkflow()
		step(w, "build").Network.Allow = []string{entry}
		if d := eval(t, open, w, vmHost); len(d.Deny) != 0 {
			t.Errorf("%s, opened: deny = %q", entry, d.Deny)
		}
	}
	for _, entry := range []string{"127.0.0.1/32:9090", "169.254.169.254/32", "192.168.1.11:22"} {
		w := okWorkflow()
		step(w, "build").Network.Allow = []string{entry}
		if d := eval(t, open, w, vmHost); !strings.Contains(strings.Join(d.Deny, "\n"), "egress_internal") {
			t.Errorf("%s, not opened: deny = %q", entry, d.Deny)
		}
	}
	d := eval(t, open, okWorkflow(), vmHost)
	if want := []string{"10.0.0.0/8", "127.0.0.1:8080", "169.254.169.254:80", "192.168.1.10:22", "[::1]:80", "[fd00::/8]:443"}; !slices.Equal(d.EgressInternal, want) {
		t.Errorf("EgressInternal = %q, want %q", d.EgressInternal, want)
	}
	if d := eval(t, def, okWorkflow(), vmHost); d.EgressInternal != nil {
		t.Errorf("default EgressInternal = %q", d.EgressInternal)
	}

	for _, bad := range []string{`["metadata.google.internal:80"]`, `["*"]`, `"10.0.0.0/8"`, `[8080]`} {
		f := writeFile(t, filepath.Join(dir, "bad.json"), `{"agentsandbox": {"egress_internal": `+bad+`}}`)
		if _, err := Load(context.Background(), Options{DataFiles: []string{f}}); err == nil || !strings.Contains(err.Error(), "egress_internal") {
			t.Errorf("Load with egress_internal %s: err = %v, want one naming egress_internal", bad, err)
		}
	}
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// TestAPIInputsData: data.agentsandbox.api_inputs has safe defaults (from
// the default data, and the same without it), merges key by key over
// them, and is read strictly: what cannot be enforced fails to load.
func TestAPIInputsData(t *testing.T) {
	def := DefaultAPIInputs()
	if got := load(t, Options{}).APIInputs(); fmt.Sprint(got) != fmt.Sprint(def) {
		t.Errorf("default data: %+v, want %+v", got, def)
	}
	if fmt.Sprint(def) != "{[http https] false [] []}" {
		t.Errorf("defaults = %v: want git over http(s) only, nothing from the store, no special address", def)
	}
	dir := t.TempDir()
	rules := writeFile(t, filepath.Join(dir, "p", "p.rego"), "package agentsandbox\n\ndeny contains \"x\" if false\n")
	if got := load(t, Options{NoDefault: true, Dirs: []string{filepath.Dir(rules)}}).APIInputs(); fmt.Sprint(got) != fmt.Sprint(def) {
		t.Errorf("--no-default-policy: %+v, want the defaults %+v", got, def)
	}
	wide := writeFile(t, filepath.Join(dir, "wide.json"), `{"agentsandbox": {"egress_deny": ["10.9.0.0/16"],
		"api_inputs": {"from_store": true, "network_allow": ["127.0.0.1/32:8080", "10.0.0.0/8", "127.0.0.1/32:8080"]}}}`)
	got := load(t, Options{DataFiles: []string{wide}}).APIInputs()
	if want := "{[http https] true [10.0.0.0/8 127.0.0.1/32:8080] [10.9.0.0/16]}"; fmt.Sprint(got) != want {
		t.Errorf("widened: %v, want %s (git_schemes kept from the default data)", got, want)
	}
	for data, want := range map[string]string{
		`{"api_inputs": ["x"]}`:                                   "want an object",
		`{"api_inputs": {"git_schemes": ["s3"]}}`:                 "git_schemes holds s3",
		`{"api_inputs": {"git_schemes": "https"}}`:                "git_schemes is string",
		`{"api_inputs": {"from_store": "yes"}}`:                   "from_store is string",
		`{"api_inputs": {"network_allow": ["*"]}}`:                "network_allow",
		`{"api_inputs": {"network_allow": ["db.internal:5432"]}}`: `"db.internal:5432", a name`,
		`{"api_inputs": {"allow_local_git": true}}`:               `unknown key "allow_local_git"`,
	} {
		p := writeFile(t, filepath.Join(dir, "bad.json"), `{"agentsandbox": `+data+`}`)
		_, err := Load(context.Background(), Options{DataFiles: []string{p}})
		var se *SourceError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "data.agentsandbox.api_inputs") {
			t.Errorf("%s: %v, want a SourceError naming the key and %q", data, err, want)
		}
	}
}
