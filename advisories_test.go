package agentsandbox

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// advisory is a published vulnerability of a Go module: versions below
// Fixed are affected.
type advisory struct {
	Module string
	Fixed  string // the first version without the vulnerability
	IDs    string // CVE / GHSA / GO ids
	What   string
}

// knownAdvisories is a local deny list, not a live vulnerability database:
// this machine has no network, so govulncheck cannot fetch
// vuln.go.dev. It holds advisories for modules this project uses or is
// likely to pull in. When a new advisory concerns a module in go.mod, add
// it here with the first fixed version. docs/dependencies.md says how.
var knownAdvisories = []advisory{
	{"github.com/ulikunitz/xz", "v0.5.15", "CVE-2025-58058, GHSA-jc7w-c686-c4v9", "unbounded memory on crafted LZMA input (archive inputs are decoded with it)"},
	{"google.golang.org/protobuf", "v1.33.0", "CVE-2024-24786, GO-2024-2611", "protojson.Unmarshal loops forever on some invalid JSON"},
	{"golang.org/x/crypto", "v0.35.0", "CVE-2025-22869, GO-2025-3487", "ssh servers can be made to hold unbounded memory by slow clients"},
	{"golang.org/x/net", "v0.38.0", "CVE-2025-22872, GO-2025-3595", "the html tokenizer mishandles solidus-terminated tags in foreign content"},
	{"golang.org/x/oauth2", "v0.27.0", "CVE-2025-22868, GO-2025-3488", "jws token parsing uses unbounded memory"},
	{"github.com/golang-jwt/jwt/v4", "v4.5.2", "CVE-2025-30204, GO-2025-3553", "header parsing allocates excessively"},
	{"github.com/golang-jwt/jwt/v5", "v5.2.2", "CVE-2025-30204, GO-2025-3553", "header parsing allocates excessively"},
	{"github.com/go-jose/go-jose/v3", "v3.0.4", "CVE-2025-27144", "compact JWE/JWS parsing uses excessive memory"},
	{"github.com/go-jose/go-jose/v4", "v4.0.5", "CVE-2025-27144", "compact JWE/JWS parsing uses excessive memory"},
	{"gopkg.in/yaml.v3", "v3.0.0-20220521103104-8f96da9f5d5e", "CVE-2022-28948, GO-2022-0603", "a crafted document panics the decoder"},
	{"github.com/opencontainers/runc", "v1.1.12", "CVE-2024-21626, GHSA-xr7r-f8xq-vfvv", "a leaked file descriptor gives containers the host filesystem"},
	{"github.com/hashicorp/go-getter", "v1.7.9", "CVE-2025-8959", "subdirectory downloads follow symlinks out of the destination"},
	{"github.com/open-policy-agent/opa", "v1.4.0", "CVE-2025-46569, GHSA-6m8w-jc87-6cr7", "the server's data API is open to Rego injection"},
}

// TestNoKnownAdvisories fails when go.mod selects a module version that
// has a known advisory (knownAdvisories). Since Go 1.17, go.mod lists
// every module that provides a package to the build, with the version the
// build uses.
func TestNoKnownAdvisories(t *testing.T) {
	mods, err := readGoMod("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) == 0 {
		t.Fatal("go.mod lists no modules")
	}
	for _, bad := range checkAdvisories(mods, knownAdvisories) {
		t.Error(bad)
	}
}

// TestAdvisoryCheck: the check catches an affected version and passes the
// fixed ones (it would have failed with xz v0.5.8, the version before the
// update).
func TestAdvisoryCheck(t *testing.T) {
	mods := map[string]string{
		"github.com/ulikunitz/xz":    "v0.5.8",
		"google.golang.org/protobuf": "v1.36.12",
		"gopkg.in/yaml.v3":           "v3.0.0-20210107192922-496545a6307b",
		"golang.org/x/net":           "v0.60.0",
	}
	got := checkAdvisories(mods, knownAdvisories)
	if len(got) != 2 || !strings.Contains(got[0], "github.com/ulikunitz/xz v0.5.8") || !strings.Contains(got[0], "CVE-2025-58058") || !strings.Contains(got[0], "v0.5.15") || !strings.Contains(got[1], "gopkg.in/yaml.v3") {
		t.Errorf("checkAdvisories = %q, want xz v0.5.8 and the old yaml.v3", got)
	}
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"v0.5.8", "v0.5.15", -1},
		{"v0.5.15", "v0.5.15", 0},
		{"v0.5.17", "v0.5.15", 1},
		{"v1.10.0", "v1.9.9", 1},
		{"v3.0.0-20220521103104-8f96da9f5d5e", "v3.0.0-20210107192922-496545a6307b", 1},
		{"v3.0.0-20220521103104-8f96da9f5d5e", "v3.0.0", -1},
		{"v3.0.1", "v3.0.0-20220521103104-8f96da9f5d5e", 1},
		{"v1.7.3-0.20250113171957-fbb4dce95f42", "v1.7.2", 1},
	} {
		if got := compareVersions(c.a, c.b); got != c.want {
			t.Errorf("compareVersions(%s, %s) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// checkAdvisories returns one message per module in mods (path to version)
// that is affected by one of advs.
func checkAdvisories(mods map[string]string, advs []advisory) []string {
	var out []string
	for _, a := range advs {
		v, ok := mods[a.Module]
		if ok && compareVersions(v, a.Fixed) < 0 {
			out = append(out, fmt.Sprintf("%s %s has a published advisory (%s: %s); update to %s or newer: go get %s@latest && go mod tidy", a.Module, v, a.IDs, a.What, a.Fixed, a.Module))
		}
	}
	return out
}

// readGoMod returns the module versions go.mod requires, and those that
// replace directives substitute (a replacement by a local directory has
// no version and is left out).
func readGoMod(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mods := map[string]string{}
	block := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "//")
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
			continue
		case block != "" && fields[0] == ")":
			block = ""
			continue
		case len(fields) == 2 && fields[1] == "(":
			block = fields[0]
			continue
		}
		verb := block
		if verb == "" {
			verb, fields = fields[0], fields[1:]
		}
		switch verb {
		case "require":
			if len(fields) == 2 {
				mods[fields[0]] = fields[1]
			}
		case "replace":
			// old [v] => new v
			if i := indexOf(fields, "=>"); i >= 0 && len(fields) == i+3 {
				mods[fields[i+1]] = fields[i+2]
			}
		}
	}
	return mods, sc.Err()
}

func indexOf(s []string, x string) int {
	for i, v := range s {
		if v == x {
			return i
		}
	}
	return -1
}

// compareVersions compares two module versions by semantic versioning:
// vMAJOR.MINOR.PATCH, then a pre-release (which pseudo-versions use) below
// the release. Build metadata (+incompatible) is ignored.
func compareVersions(a, b string) int {
	ca, pa := splitVersion(a)
	cb, pb := splitVersion(b)
	for i := range 3 {
		if ca[i] != cb[i] {
			if ca[i] < cb[i] {
				return -1
			}
			return 1
		}
	}
	switch {
	case pa == pb:
		return 0
	case pa == "":
		return 1
	case pb == "":
		return -1
	}
	ia, ib := strings.Split(pa, "."), strings.Split(pb, ".")
	for i := 0; i < len(ia) && i < len(ib); i++ {
		if c := compareIdent(ia[i], ib[i]); c != 0 {
			return c
		}
	}
	switch {
	case len(ia) < len(ib):
		return -1
	case len(ia) > len(ib):
		return 1
	}
	return 0
}

func splitVersion(v string) ([3]int, string) {
	v = strings.TrimPrefix(v, "v")
	v, _, _ = strings.Cut(v, "+")
	core, pre, _ := strings.Cut(v, "-")
	var n [3]int
	for i, p := range strings.SplitN(core, ".", 3) {
		n[i], _ = strconv.Atoi(p)
	}
	return n, pre
}

// compareIdent compares pre-release identifiers: numbers numerically and
// below words, words in ASCII order.
func compareIdent(a, b string) int {
	na, ea := strconv.Atoi(a)
	nb, eb := strconv.Atoi(b)
	switch {
	case ea == nil && eb == nil:
		return cmpInt(na, nb)
	case ea == nil:
		return -1
	case eb == nil:
		return 1
	}
	return strings.Compare(a, b)
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
