package nixbuild

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestBuildArgs(t *testing.T) {
	base := []string{"nix", "--extra-experimental-features", "nix-command flakes", "build", "--json", "--no-link"}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		attrs []string
		o     Options
		want  []string
	}{
		{"plain", []string{"packages.x86_64-linux.train"}, Options{},
			cat(base, []string{"path:/gen/flake#packages.x86_64-linux.train"})},
		{"offline, two attrs", []string{"a", "b"}, Options{Offline: true},
			cat(base, []string{"--offline", "path:/gen/flake#a", "path:/gen/flake#b"})},
		{"locked", []string{"a"}, Options{Locked: true},
			cat(base, []string{"--no-update-lock-file", "path:/gen/flake#a"})},
		{"update lock wins over locked", []string{"a"}, Options{Locked: true, UpdateLock: true, Offline: true},
			cat(base, []string{"--offline", "--recreate-lock-file", "path:/gen/flake#a"})},
		{"update lock without a lock", []string{"a"}, Options{UpdateLock: true},
			cat(base, []string{"--recreate-lock-file", "path:/gen/flake#a"})},
		{"lock file alone does not freeze", []string{"a"}, Options{LockFile: "/w/ml.yaml.lock"},
			cat(base, []string{"path:/gen/flake#a"})},
		{"shared: substituters, keys, builders, no local jobs, a store", []string{"a"}, Options{Store: "/tmp/s", Share: Sharing{
			Substituters: []string{"https://cache.example/a", "file:///srv/c"}, TrustedPublicKeys: []string{"k1:AAAA", "k2:BBBB"},
			Builders: "ssh://b x86_64-linux", MaxJobs: "0", Push: "file:///srv/out"}},
			cat(base, []string{"--store", "/tmp/s", "--option", "extra-substituters", "https://cache.example/a file:///srv/c",
				"--option", "extra-trusted-public-keys", "k1:AAAA k2:BBBB", "--builders", "ssh://b x86_64-linux", "--max-jobs", "0",
				"path:/gen/flake#a"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := buildArgs("/gen/flake", tc.attrs, tc.o); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("BuildArgs:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestPathInfoArgs(t *testing.T) {
	got := pathInfoArgs("", []string{"/nix/store/a", "/nix/store/b"})
	want := []string{"nix", "--extra-experimental-features", "nix-command flakes", "path-info", "--json", "--recursive", "/nix/store/a", "/nix/store/b"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
	got = pathInfoArgs("/tmp/s", []string{"/nix/store/a"})
	want = []string{"nix", "--extra-experimental-features", "nix-command flakes", "path-info", "--json", "--recursive", "--store", "/tmp/s", "/nix/store/a"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

const (
	sri    = "sha256-QNZcLgaiVLIFrjvgz8uwQiCE+l7BbytbTe61jsrSNYI="
	nix32  = "sha256:10imsb58xdgf9mdjnvy1bvx88822n35wzq1vmq2v4m520qp5rmj0"
	base16 = "sha256:40d65c2e06a254b205ae3be0cfcbb0422084fa5ec16f2b5b4deeb58ecad23582"
)

func TestNormaliseNarHash(t *testing.T) {
	for _, in := range []string{sri, nix32, base16} {
		got, err := normaliseNarHash(in)
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if got != nix32 {
			t.Errorf("NormaliseNarHash(%s) = %s, want %s", in, got, nix32)
		}
	}
	for _, bad := range []string{"", "sha256:", "md5:abc", "sha512-" + strings.Repeat("A", 88), "sha256:zzzz", "sha1-2jmj7l5rSw0yVb/vlWAYkK/YBwk="} {
		if _, err := normaliseNarHash(bad); err == nil {
			t.Errorf("NormaliseNarHash(%q) accepted", bad)
		}
	}
}

func TestParsePathInfo(t *testing.T) {
	want := []PathInfo{
		{Path: "/nix/store/hc4dlpi1sb90pap7vsa4nirmgfzsjc68-a", NarHash: nix32, NarSize: 120, References: []string{}},
		{Path: "/nix/store/zs8m54jnkxg540h6927fnk3fa7229lww-b", NarHash: nix32, NarSize: 328,
			References: []string{"/nix/store/hc4dlpi1sb90pap7vsa4nirmgfzsjc68-a"}},
	}
	for _, tc := range []struct{ name, in string }{
		// Nix 2.8 (Debian's nix-bin): an array, SRI hashes, in no promised order.
		{"array", `[{"path":"/nix/store/zs8m54jnkxg540h6927fnk3fa7229lww-b","narHash":"` + sri + `","narSize":328,"references":["/nix/store/hc4dlpi1sb90pap7vsa4nirmgfzsjc68-a"],"deriver":"/nix/store/l4pyymq6wp1jy8y8mvbz5rz4ja3qv0lj-b.drv","registrationTime":1795980692,"ultimate":true},
 {"path":"/nix/store/hc4dlpi1sb90pap7vsa4nirmgfzsjc68-a","narHash":"` + sri + `","narSize":120,"references":[],"deriver":"/nix/store/gqk4q3lr6kcifw4xvzzn9g63lmik1kbj-a.drv"}]`},
		// Newer Nix: an object keyed by path.
		{"object", `{"/nix/store/zs8m54jnkxg540h6927fnk3fa7229lww-b":{"narHash":"` + nix32 + `","narSize":328,"references":["/nix/store/hc4dlpi1sb90pap7vsa4nirmgfzsjc68-a"]},
 "/nix/store/hc4dlpi1sb90pap7vsa4nirmgfzsjc68-a":{"narHash":"` + base16 + `","narSize":120,"references":null}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parsePathInfo([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v\nwant %+v", got, want)
			}
		})
	}
	for _, bad := range []string{
		``, `"x"`, `[{"narHash":"` + sri + `"}]`, `[{"path":"/nix/store/x","narHash":"nope"}]`,
		`{"/nix/store/x":null}`, `[{"path":1}]`,
	} {
		if _, err := parsePathInfo([]byte(bad)); err == nil {
			t.Errorf("ParsePathInfo(%q) accepted", bad)
		}
	}
}

func TestParseBuildJSON(t *testing.T) {
	in := `[{"drvPath":"/nix/store/gqk4q3lr6kcifw4xvzzn9g63lmik1kbj-a.drv","outputs":{"out":"/nix/store/hc4dlpi1sb90pap7vsa4nirmgfzsjc68-a"}},{"drvPath":"/nix/store/l4pyymq6wp1jy8y8mvbz5rz4ja3qv0lj-b.drv","outputs":{"out":"/nix/store/zs8m54jnkxg540h6927fnk3fa7229lww-b","dev":"/nix/store/x-b-dev"}}]`
	got, err := parseBuildJSON([]byte(in), []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Output{
		{Attr: "a", DrvPath: "/nix/store/gqk4q3lr6kcifw4xvzzn9g63lmik1kbj-a.drv", Out: "/nix/store/hc4dlpi1sb90pap7vsa4nirmgfzsjc68-a",
			Outputs: map[string]string{"out": "/nix/store/hc4dlpi1sb90pap7vsa4nirmgfzsjc68-a"}},
		{Attr: "b", DrvPath: "/nix/store/l4pyymq6wp1jy8y8mvbz5rz4ja3qv0lj-b.drv", Out: "/nix/store/zs8m54jnkxg540h6927fnk3fa7229lww-b",
			Outputs: map[string]string{"out": "/nix/store/zs8m54jnkxg540h6927fnk3fa7229lww-b", "dev": "/nix/store/x-b-dev"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{`{}`, `[]`, `[{"drvPath":"/x.drv","outputs":{"dev":"/y"}},{}]`} {
		if _, err := parseBuildJSON([]byte(bad), []string{"a", "b"}); err == nil {
			t.Errorf("parseBuildJSON(%q) accepted", bad)
		}
	}
}

func TestBuildErrorNamesStepAndAttribute(t *testing.T) {
	attrs := []string{"packages.x86_64-linux.prep", "packages.x86_64-linux.train"}
	o := Options{Steps: map[string]string{"packages.x86_64-linux.train": "train", "packages.x86_64-linux.prep": "prep"}}
	cause := &commandError{argv: []string{"nix", "build"}, err: errors.New("exit status 1"),
		stderr: "error: builder for '/nix/store/abc-train.drv' failed with exit code 7"}
	err := buildError(attrs, o, cause)
	msg := err.Error()
	if !strings.Contains(msg, `step "train" (attribute packages.x86_64-linux.train)`) || strings.Contains(msg, "prep") {
		t.Errorf("error %q should name step train only", msg)
	}
	if !strings.Contains(msg, "failed with exit code 7") {
		t.Errorf("error %q lacks nix's stderr", msg)
	}
	if !errors.Is(err, cause) {
		t.Error("error does not wrap the command error")
	}
	// Nothing points at one attribute: name them all.
	cause.stderr = "error: out of memory"
	msg = buildError(attrs, o, cause).Error()
	if !strings.Contains(msg, `step "prep"`) || !strings.Contains(msg, `step "train"`) {
		t.Errorf("error %q should name both steps", msg)
	}
}

func TestNixMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Build(t.Context(), t.TempDir(), []string{"a"}, Options{})
	if !errors.Is(err, ErrNixMissing) || !strings.Contains(err.Error(), "apt-get install nix-bin") {
		t.Errorf("Build without nix: %v", err)
	}
	if _, err := Closure(t.Context(), []string{"/nix/store/x"}); !errors.Is(err, ErrNixMissing) {
		t.Errorf("Closure without nix: %v", err)
	}
}

func TestTailBuffer(t *testing.T) {
	tb := &tailBuffer{max: 5}
	tb.Write([]byte("abc"))
	if tb.String() != "abc" {
		t.Errorf("%q", tb.String())
	}
	tb.Write([]byte("defgh"))
	if tb.String() != "[...]\ndefgh" {
		t.Errorf("%q", tb.String())
	}
}

// TestBuildUsersMissing: Debian's nix-bin without its build users fails
// every build; the error names the group and the fix.
func TestBuildUsersMissing(t *testing.T) {
	dir := t.TempDir()
	nix := filepath.Join(dir, "nix")
	script := "#!/bin/sh\necho \"error: the group 'nixbld' specified in 'build-users-group' does not exist\" >&2\nexit 1\n"
	if err := os.WriteFile(nix, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Build(t.Context(), t.TempDir(), []string{"packages.x86_64-linux.hello"}, Options{Nix: nix})
	if !errors.Is(err, ErrBuildUsers) {
		t.Fatalf("Build = %v, want ErrBuildUsers", err)
	}
	for _, want := range []string{`group "nixbld"`, "scripts/install-nix.sh adds them", "build-users-group ="} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
