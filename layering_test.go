package agentsandbox

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/agentsandbox/agentsandbox"

// pureCore may never reach the privileged edge, not even indirectly.
var pureCore = []string{"workflow", "policy", "nixgen", "templates", "record"}

// pureCoreExact are pure packages whose subpackages are not: guest is the
// protocol, guest/agent the agent that makes the system calls; egress is
// the rules and decisions, netns/egress/dns and netns/egress/proxy the servers that
// enforce them.
var pureCoreExact = []string{"guest", "egress"}

// edge are the project's privileged packages: the pure core may not reach
// them by any path.
var edge = []string{
	module + "/vmrunner",
	module + "/netns",
	module + "/inputs",
}

// syscallLevel are libraries the pure core may not import itself. (Third-party
// libraries such as OPA may use them internally; that is their business.)
var syscallLevel = []string{
	"golang.org/x/sys/unix",
	"github.com/vishvananda/netlink",
	"github.com/vishvananda/netns",
	"github.com/google/nftables",
	"github.com/containerd/cgroups",
}

type listedPackage struct {
	ImportPath string
	Doc        string
	Dir        string
	GoFiles    []string
	Imports    []string
	Deps       []string
}

func matches(path string, list []string) bool {
	for _, f := range list {
		if path == f || strings.HasPrefix(path, f+"/") {
			return true
		}
	}
	return false
}

func goList(t *testing.T, args ...string) []listedPackage {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-json"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p listedPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// TestPureCoreImports enforces the layering rule of the design: the pure
// core never imports the privileged edge.
func TestPureCoreImports(t *testing.T) {
	var args []string
	for _, p := range pureCore {
		args = append(args, "./"+p+"/...")
	}
	for _, p := range pureCoreExact {
		args = append(args, "./"+p)
	}
	for _, p := range goList(t, args...) {
		for _, imp := range p.Imports {
			if matches(imp, syscallLevel) || matches(imp, edge) {
				t.Errorf("%s imports %s: the pure core must not import the privileged edge", p.ImportPath, imp)
			}
		}
		for _, d := range p.Deps {
			if matches(d, edge) {
				t.Errorf("%s depends on %s: the pure core must not reach the privileged edge", p.ImportPath, d)
			}
		}
	}
}

// TestPackageDocs requires a package doc comment in every package.
func TestPackageDocs(t *testing.T) {
	for _, p := range goList(t, "./...") {
		if p.Doc != "" {
			continue
		}
		// go list only reports the doc of non-test files; say which file to add.
		fset := token.NewFileSet()
		hasDoc := false
		for _, f := range p.GoFiles {
			af, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err == nil && af.Doc != nil {
				hasDoc = true
			}
		}
		if !hasDoc {
			t.Errorf("package %s has no package doc comment: add one (doc.go) that says what the package is for", p.ImportPath)
		}
	}
}

// below lists, for each room, the rooms it may never reach, not even
// through another package: the engine and the commands sit on top of the
// sandboxes; realisation and the network room sit beside and below them.
var below = []struct {
	rooms     []string // ./-relative package patterns
	forbidden []string
	why       string
}{
	{[]string{"vmrunner/...", "netns/...", "inputs/...", "nixbuild/...", "guest/...", "fsx/jobfs/..."},
		[]string{module + "/engine", module + "/cmd"},
		"the engine and the commands call the sandboxes, never the other way"},
	{[]string{"nixbuild/..."},
		[]string{module + "/vmrunner", module + "/netns"},
		"realisation sits beside generation, not under the runner"},
	{[]string{"netns/..."},
		[]string{module + "/vmrunner"},
		"the network room is below the sandboxes that use it"},
	{[]string{"guest/..."},
		[]string{module + "/vmrunner", module + "/netns", module + "/nixgen", module + "/policy"},
		"the agent knows the protocol and nothing of the host"},
}

// TestImportsPointOneWay enforces below.
func TestImportsPointOneWay(t *testing.T) {
	for _, b := range below {
		var args []string
		for _, r := range b.rooms {
			args = append(args, "./"+r)
		}
		for _, p := range goList(t, args...) {
			for _, d := range append(append([]string(nil), p.Imports...), p.Deps...) {
				if matches(d, b.forbidden) {
					t.Errorf("%s reaches %s: %s", p.ImportPath, d, b.why)
				}
			}
		}
	}
}

// testSupport are packages only tests may import.
var testSupport = []string{
	module + "/internal/runnertest",
	module + "/internal/fakebackend",
	module + "/internal/vmfixture",
	module + "/internal/testtier",
	module + "/internal/testnet",
	module + "/internal/fakesandboxes",
	module + "/internal/serverproc",
	module + "/internal/otlptest",
	module + "/internal/nartest",
}

// TestTestSupportOnlyInTests: no product package imports test support
// (go list's Imports leaves out _test.go files); test support may import
// itself.
func TestTestSupportOnlyInTests(t *testing.T) {
	for _, p := range goList(t, "./...") {
		if matches(p.ImportPath, testSupport) {
			continue
		}
		for _, imp := range p.Imports {
			if matches(imp, testSupport) {
				t.Errorf("%s imports test support %s: move what it needs into a product package, or the use into a _test.go file", p.ImportPath, imp)
			}
		}
	}
}

// lowLevel lists packages low in the privileged edge and every package of
// the module each may reach, directly or not. A type they share with the
// packages above them (cgroup.Usage, the step's usage) lives in them, so
// no callback or function pointer is needed to dodge a cycle.
var lowLevel = []struct {
	room    string // ./-relative package
	allowed []string
	why     string
}{
	{"vmrunner/cgroup", nil,
		"cgroup imports nothing above it: the runner, the backends and the engine use it, never the other way"},
	{"vmrunner/hoststate",
		// egress is the pure core whose addresses netns's firewall uses.
		[]string{module + "/netns", module + "/egress", module + "/vmrunner/cgroup", module + "/vmrunner/wsquota", module + "/fsx/atomicfile"},
		"the state, naming and gc room drives the mechanisms below it and imports no backend, sandbox or runner"},
}

// TestLowLevelImports enforces lowLevel.
func TestLowLevelImports(t *testing.T) {
	for _, l := range lowLevel {
		for _, p := range goList(t, "./"+l.room) {
			for _, d := range p.Deps { // every import, direct or not
				if (d == module || strings.HasPrefix(d, module+"/")) && !slices.Contains(l.allowed, d) {
					t.Errorf("%s reaches %s: %s", p.ImportPath, d, l.why)
				}
			}
		}
	}
}

// TestHostStateImportsNoBackend: whatever else hoststate may come to
// import, it never reaches a backend or the sandbox lifecycle (they call
// it, for names, the state file and gc).
func TestHostStateImportsNoBackend(t *testing.T) {
	backends := []string{module + "/vmrunner/namespace", module + "/vmrunner/vm", module + "/vmrunner/sandbox", module + "/vmrunner/jail", module + "/internal/fakebackend"}
	for _, p := range goList(t, "./vmrunner/hoststate") {
		for _, d := range p.Deps { // every import, direct or not
			if matches(d, backends) || d == module+"/vmrunner" {
				t.Errorf("%s reaches %s: the state package imports no backend", p.ImportPath, d)
			}
		}
	}
}
