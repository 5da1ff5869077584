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

// pureCore are folders of the pure core: every package in them, to the
// last subfolder, may never reach the privileged edge, not even
// indirectly. egress is the rules and decisions of a step's egress (its
// servers live with the network room, netns/egress); microvm is the runner
// contract nixgen and the vm backend share.
var pureCore = []string{"workflow", "policy", "nixgen", "templates", "record", "egress", "microvm"}

// pureCoreExact are pure packages whose subpackages are not: guest is the
// protocol, guest/agent the agent that makes the system calls.
var pureCoreExact = []string{"guest"}

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
	{[]string{"vmrunner/..."},
		[]string{module + "/nixgen"},
		"the runner contract (names in the VM's directory, the tap, qemu's arguments, the hypervisors) is microvm's; the backends never ask the generator"},
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

// testSupport is the folder of test support: every package under
// internal/ is one, and only tests may import them. Product helpers live
// elsewhere (fsx/ for the file-system helpers every layer uses).
var testSupport = []string{module + "/internal"}

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
				t.Errorf("%s imports test support %s: move what it needs into a product package (out of internal/), or the use into a _test.go file", p.ImportPath, imp)
			}
		}
	}
}

// TestNoFolderHoldsBoth: a package whose own (non-test) files import
// "testing" is test support, and test support lives under internal/ and
// nowhere else; so no top-level folder holds both product code and test
// support. (TestTestSupportOnlyInTests keeps product code out of
// internal/: a package there that product code imports is a product
// helper in the wrong room.)
func TestNoFolderHoldsBoth(t *testing.T) {
	kinds := map[string]map[bool][]string{} // top-level folder -> test support? -> packages
	for _, p := range goList(t, "./...") {
		support := matches(p.ImportPath, testSupport) || slices.Contains(p.Imports, "testing")
		if support && !matches(p.ImportPath, testSupport) {
			t.Errorf("%s is test support (it imports \"testing\" outside its _test.go files) in a product folder: move it under internal/", p.ImportPath)
		}
		f := topFolder(p.ImportPath)
		if kinds[f] == nil {
			kinds[f] = map[bool][]string{}
		}
		kinds[f][support] = append(kinds[f][support], p.ImportPath)
	}
	for f, k := range kinds {
		if len(k[true]) > 0 && len(k[false]) > 0 {
			t.Errorf("folder %s holds product code %v and test support %v: keep test support under internal/ and product code out of it", f, k[false], k[true])
		}
	}
}

// topFolder is the top-level folder of a package of the module ("." for
// the module's own package).
func topFolder(path string) string {
	rel, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return "."
	}
	f, _, _ := strings.Cut(rel, "/")
	return f
}

// TestLinkedFoldersHaveNoCycle: the top-level folders of every package
// the two commands link import each other without a cycle, so each folder
// is a room above or below another, never both. An import inside a folder
// does not count.
func TestLinkedFoldersHaveNoCycle(t *testing.T) {
	// why[a][b] are the imports that make folder a import folder b.
	why := map[string]map[string][]string{}
	for _, p := range goList(t, "-deps", "./cmd/agentsandbox", "./cmd/agentsandbox-guest") {
		if !matches(p.ImportPath, []string{module}) {
			continue
		}
		from := topFolder(p.ImportPath)
		for _, imp := range p.Imports {
			if to := topFolder(imp); matches(imp, []string{module}) && to != from {
				if why[from] == nil {
					why[from] = map[string][]string{}
				}
				why[from][to] = append(why[from][to], strings.TrimPrefix(p.ImportPath, module+"/")+" imports "+strings.TrimPrefix(imp, module+"/"))
			}
		}
	}
	for _, cycle := range folderCycles(why) {
		var imports []string
		for i := range len(cycle) - 1 {
			imports = append(imports, why[cycle[i]][cycle[i+1]]...)
		}
		t.Errorf("top-level folders %s form a cycle, through %d imports: %s; move the package that points up into the room it serves (or what it needs into the room below)",
			strings.Join(cycle, " -> "), len(imports), strings.Join(imports, "; "))
	}
}

// folderCycles finds a cycle through every folder that lies on one (a
// depth-first search; each cycle is reported once, from the folder where
// the search closed it), as a path whose last element is its first.
func folderCycles(edges map[string]map[string][]string) [][]string {
	var folders []string
	for f := range edges {
		folders = append(folders, f)
	}
	slices.Sort(folders)
	const (
		unseen = iota
		open
		done
	)
	state := map[string]int{}
	var stack []string
	var cycles [][]string
	var visit func(f string)
	visit = func(f string) {
		state[f] = open
		stack = append(stack, f)
		var next []string
		for g := range edges[f] {
			next = append(next, g)
		}
		slices.Sort(next)
		for _, g := range next {
			switch state[g] {
			case unseen:
				visit(g)
			case open:
				i := slices.Index(stack, g)
				cycles = append(cycles, append(slices.Clone(stack[i:]), g))
			}
		}
		stack = stack[:len(stack)-1]
		state[f] = done
	}
	for _, f := range folders {
		if state[f] == unseen {
			visit(f)
		}
	}
	return cycles
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
	{"fsx/...", nil,
		"the file-system helpers are used by every layer, the pure core included, and import nothing of the module"},
	{"microvm", []string{module + "/guest", module + "/workflow"},
		"the runner contract knows the protocol and the workflow's types, nothing of the generator or the host"},
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
