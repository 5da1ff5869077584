package record

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/fsx/jobfs"
	nt "github.com/agentsandbox/agentsandbox/internal/nartest"
)

// openRestorer opens dir as a restore target for the test.
func openRestorer(t *testing.T, dir string) *jobfs.Restorer {
	t.Helper()
	tr, err := jobfs.OpenRestorer(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// restoreAt restores h at the host path dst, beneath its parent.
func restoreAt(t *testing.T, s *Store, h NarHash, dst string) error {
	t.Helper()
	return s.RestoreNAR(h, openRestorer(t, filepath.Dir(dst)), filepath.Base(dst))
}

func putRawNAR(t testing.TB, s *Store, n nt.Node) NarHash {
	t.Helper()
	d, _, err := s.PutBlob(bytes.NewReader(n.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	return NarHash(d)
}

// The raw encoder writes exactly what go-nix writes for the same tree, so
// the malformed NARs below differ from real ones only where they mean to.
func TestRawNARMatchesPutNAR(t *testing.T) {
	s := newStore(t)
	want := putTree(t, s, tree{"a": "1", "d/b": "x:2", "l": "->a"})
	got := putRawNAR(t, s, nt.Dir(nt.E("a", nt.File("1")), nt.E("d", nt.Dir(nt.E("b", nt.Exec("2")))), nt.E("l", nt.Symlink("a"))))
	if got != want {
		t.Fatalf("raw NAR %s, PutNAR %s", got, want)
	}
}

// empty reports whether dir holds nothing.
func assertEmpty(t *testing.T, dir, what string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("%s: %s holds %v", what, dir, names)
	}
}

// TestRestoreNARRefusesMalformedTrees: a NAR whose entries are not a tree
// Nix would write (a name twice, out of order, "", "." or "..", holding
// '/' or NUL) is refused with a message naming the entry, and leaves
// nothing at the target, no temporary beside it and nothing outside,
// even where its first entry is a symlink out of the target and a later
// one would be written through it.
func TestRestoreNARRefusesMalformedTrees(t *testing.T) {
	s := newStore(t)
	outside := t.TempDir()
	for _, c := range []struct {
		name string
		nar  nt.Node
		want string // in the error
	}{
		{"a name twice: a symlink out, then a directory through it",
			nt.Dir(nt.E("x", nt.Symlink(outside)), nt.E("x", nt.Dir(nt.E("file", nt.File("pwned"))))), `entry "/x" repeats`},
		{"a name twice: a symlink, then a file at it",
			nt.Dir(nt.E("x", nt.Symlink(outside+"/f")), nt.E("x", nt.File("pwned"))), `entry "/x" repeats`},
		{"a name twice: two files",
			nt.Dir(nt.E("x", nt.File("1")), nt.E("x", nt.File("2"))), `entry "/x" repeats`},
		{"a name . : the directory again, as a symlink",
			nt.Dir(nt.E("a", nt.Dir(nt.E(".", nt.Symlink(outside))))), `entry "/a" repeats`},
		{"an empty name: the directory again, as a directory",
			nt.Dir(nt.E("a", nt.Dir(nt.E("", nt.Dir(nt.E("file", nt.File("pwned"))))))), `entry "/a" repeats`},
		{"a name .. at the top", nt.Dir(nt.E("..", nt.Symlink(outside))), "not a new path beneath the root"},
		{"a name .. inside", nt.Dir(nt.E("a", nt.Dir(nt.E("b", nt.File("1")), nt.E("..", nt.Dir(nt.E("c", nt.File("2"))))))), "wrong order"},
		{"names out of order", nt.Dir(nt.E("b", nt.File("1")), nt.E("a", nt.File("2"))), "wrong order"},
		{"a name with /", nt.Dir(nt.E("a/b", nt.File("1"))), "invalid"},
		{"a name with NUL", nt.Dir(nt.E("a\x00b", nt.File("1"))), "invalid"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := putRawNAR(t, s, c.nar)
			parent := t.TempDir()
			err := restoreAt(t, s, h, filepath.Join(parent, "out"))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("restore: %v, want an error with %q", err, c.want)
			}
			assertEmpty(t, parent, "the target's parent")
			assertEmpty(t, outside, "outside")
		})
	}
}

// TestRestoreNARNeverWritesThroughASymlink: a restore refuses to write
// through a symlink at or above its target, whether an earlier restore
// left it (a NAR whose root is a symlink out, then a second NAR beneath
// it: what Export does with nested outputs when the check before it is
// skipped) or it was there before; an existing target is refused and kept.
func TestRestoreNARNeverWritesThroughASymlink(t *testing.T) {
	s := newStore(t)
	outside := t.TempDir()
	dir := t.TempDir()
	tr := openRestorer(t, dir)
	if err := s.RestoreNAR(putRawNAR(t, s, nt.Symlink(outside)), tr, "d"); err != nil {
		t.Fatalf("a NAR that is one symlink: %v", err)
	}
	if target, err := os.Readlink(filepath.Join(dir, "d")); err != nil || target != outside {
		t.Fatalf("d is %q, %v; want a symlink to %s", target, err, outside)
	}
	file := putRawNAR(t, s, nt.File("pwned"))
	for _, rel := range []string{"d/file", "d/x/file"} {
		if err := s.RestoreNAR(file, tr, rel); !errors.Is(err, jobfs.ErrSymlink) {
			t.Errorf("restore at %s, beneath a restored symlink: %v, want a symlink error", rel, err)
		}
	}
	// One output holding a symlink x, the next one beneath d2/x.
	if err := s.RestoreNAR(putRawNAR(t, s, nt.Dir(nt.E("x", nt.Symlink(outside)))), tr, "d2"); err != nil {
		t.Fatal(err)
	}
	if err := s.RestoreNAR(file, tr, "d2/x/file"); !errors.Is(err, jobfs.ErrSymlink) {
		t.Errorf("restore at d2/x/file: %v, want a symlink error", err)
	}
	// A symlink to inside the target is no more followed.
	if err := os.Symlink("d2", filepath.Join(dir, "in")); err != nil {
		t.Fatal(err)
	}
	if err := s.RestoreNAR(file, tr, "in/new"); !errors.Is(err, jobfs.ErrSymlink) {
		t.Errorf("restore at in/new: %v, want a symlink error", err)
	}
	assertEmpty(t, outside, "outside")
	if _, err := os.Lstat(filepath.Join(dir, "d2", "new")); err == nil {
		t.Error("a restore through a symlink inside the target wrote d2/new")
	}
	// An existing target, a file or a symlink, is an error and untouched.
	if err := s.RestoreNAR(file, tr, "d"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("restore over the symlink d: %v", err)
	}
	if target, _ := os.Readlink(filepath.Join(dir, "d")); target != outside {
		t.Errorf("d changed to %q", target)
	}
	// Paths that leave the target are refused before anything is read.
	for _, rel := range []string{"../x", outside + "/x", "", ".", "a/../../x", "a//b", "a/./b", "a/"} {
		if err := s.RestoreNAR(file, tr, rel); err == nil {
			t.Errorf("restore at %q: no error", rel)
		}
	}
	assertEmpty(t, outside, "outside")
	// Nothing of the refused restores is left behind.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			t.Errorf("a temporary %s is left in the target", e.Name())
		}
	}
}

// forgedRecord stores a record whose step "build" has an output d holding
// a symlink x to outside, and a second output d/x/file: every blob present
// and intact, so only the layout is wrong.
func forgedRecord(t *testing.T, s *Store, outside string) ID {
	t.Helper()
	r := sampleRecord(false)
	r.Steps = r.Steps[:1]
	st := &r.Steps[0]
	st.Name = "build"
	dh := putRawNAR(t, s, nt.Dir(nt.E("x", nt.Symlink(outside))))
	fh := putRawNAR(t, s, nt.File("pwned\n"))
	st.Outputs = []Output{{Path: "d", NarHash: dh}, {Path: "d/x/file", NarHash: fh}}
	id, err := s.Put(r)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestExportRefusesNestedOutputs: the forged record of issue 23 is
// refused by Verify, naming the output, and by Export before it writes
// anything; nothing appears outside the export directory.
func TestExportRefusesNestedOutputs(t *testing.T) {
	s := newStore(t)
	outside := t.TempDir()
	id := forgedRecord(t, s, outside)
	problems, err := s.Verify(id)
	if err != nil {
		t.Fatal(err)
	}
	var layout []Problem
	for _, p := range problems {
		if errors.Is(p.Err, ErrOutputLayout) {
			layout = append(layout, p)
		}
	}
	if len(layout) != 1 || layout[0].What != "step build: output d/x/file" || !strings.Contains(layout[0].String(), `lies inside output "d" of step "build"`) {
		t.Errorf("Verify's layout problems: %v", layout)
	}
	dir := t.TempDir()
	paths, err := s.Export(id, openRestorer(t, dir))
	if !errors.Is(err, ErrOutputLayout) || len(paths) != 0 {
		t.Fatalf("Export: %v, %v; want a layout error and nothing exported", paths, err)
	}
	for _, want := range []string{"nothing exported", `step "build" output "d/x/file"`, `inside output "d"`, "records verify " + id.String()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Export's error lacks %q: %v", want, err)
		}
	}
	assertEmpty(t, dir, "the export directory")
	assertEmpty(t, outside, "outside")
}

func TestOutputLayout(t *testing.T) {
	out := func(paths ...string) []Output {
		var os []Output
		for _, p := range paths {
			os = append(os, Output{Path: p})
		}
		return os
	}
	for _, c := range []struct {
		name  string
		steps []Step
		want  []string // "step/path: text" per problem
	}{
		{"apart", []Step{{Name: "a", Outputs: out("x", "y/z", "x-y")}, {Name: "b", Outputs: out("x")}}, nil},
		{"nested", []Step{{Name: "a", Outputs: out("d", "d/x/file")}}, []string{`a/d/x/file: it lies inside output "d" of step "a"`}},
		// "d-c" sorts between "d" and "d/x": an adjacent-pairs check misses it.
		{"nested, another between", []Step{{Name: "a", Outputs: out("d", "d-c", "d/x")}}, []string{`a/d/x: it lies inside output "d"`}},
		{"inner first", []Step{{Name: "a", Outputs: out("d/x", "d")}}, []string{`a/d/x: it lies inside output "d"`}},
		{"same path", []Step{{Name: "a", Outputs: out("d", "d")}}, []string{`a/d: output "d" of step "a" is at the same path`}},
		{"same step twice", []Step{{Name: "a", Outputs: out("d")}, {Name: "a", Outputs: out("d/e")}}, []string{`a/d/e: it lies inside output "d" of step "a"`}},
		{"dotdot", []Step{{Name: "a", Outputs: out("../x")}}, []string{"a/../x: the output path leaves its directory with .."}},
		{"into another step", []Step{{Name: "a", Outputs: out("../b/x")}, {Name: "b", Outputs: out("x")}}, []string{"a/../b/x: the output path leaves"}},
		{"absolute", []Step{{Name: "a", Outputs: out("/etc/x")}}, []string{"a//etc/x: the output path is absolute"}},
		{"unclean", []Step{{Name: "a", Outputs: out("d/./x", "d//y", "e/")}}, []string{"a/d/./x: the output path is not a clean path", "a/d//y: the output path is not a clean", "a/e/: the output path is not a clean"}},
		{"empty and dot", []Step{{Name: "a", Outputs: out("", ".")}}, []string{"a/: the output path is empty", "a/.: the output path names the directory itself"}},
		{"step name with /", []Step{{Name: "a/b", Outputs: out("c")}, {Name: "a", Outputs: out("b")}}, []string{"a/b/c: the step name holds '/'"}},
		{"step name ..", []Step{{Name: "..", Outputs: out("x")}}, []string{"../x: the step name leaves"}},
		{"step name empty", []Step{{Name: "", Outputs: out("x")}}, []string{"/x: the step name is empty"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, p := range OutputLayout(&Record{Steps: c.steps}) {
				if !errors.Is(p, ErrOutputLayout) {
					t.Errorf("%v does not wrap ErrOutputLayout", p)
				}
				msg := strings.TrimPrefix(p.Err.Error(), ErrOutputLayout.Error()+": ")
				got = append(got, p.Step+"/"+p.Path+": "+msg)
			}
			if len(got) != len(c.want) {
				t.Fatalf("problems:\n%s\nwant %d like:\n%s", strings.Join(got, "\n"), len(c.want), strings.Join(c.want, "\n"))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], c.want[i]) {
					t.Errorf("problem %d:\n%s\nwant it to start with\n%s", i, got[i], c.want[i])
				}
			}
		})
	}
}

// TestVerifyReadsOutputNARs: an output whose blob is intact but whose NAR
// a restore refuses (padding that is not zero, a name twice) is a Problem
// of records verify, naming the output, as it is an error of export.
func TestVerifyReadsOutputNARs(t *testing.T) {
	s := newStore(t)
	good := nt.Dir(nt.E("a", nt.File("1")))
	padded := good.Bytes()
	// The padding of the first string, "nix-archive-1" (13 bytes, 3 of
	// padding after it at offsets 21-23).
	padded[22] = '@'
	pd, _, err := s.PutBlob(bytes.NewReader(padded))
	if err != nil {
		t.Fatal(err)
	}
	twice := putRawNAR(t, s, nt.Dir(nt.E("x", nt.File("1")), nt.E("x", nt.File("2"))))
	r := sampleRecord(false)
	r.Steps = r.Steps[:1]
	st := &r.Steps[0]
	st.Name = "build"
	st.Outputs = []Output{{Path: "good", NarHash: putRawNAR(t, s, good)}, {Path: "padded", NarHash: NarHash(pd)}, {Path: "twice", NarHash: twice}}
	id, err := s.Put(r)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := s.Verify(id)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"step build: output padded": "at offset 22 is not zero",
		"step build: output twice":  `entry "/x" repeats`,
	}
	got := map[string]string{}
	for _, p := range problems {
		if strings.HasPrefix(p.What, "step build: output ") { // the sample's other blobs are not stored
			got[p.What] = p.Err.Error()
		}
	}
	if len(got) != len(want) {
		t.Errorf("output problems %v, want one for each of %v", got, want)
	}
	for what, w := range want {
		if !strings.Contains(got[what], w) {
			t.Errorf("%s: problem %q, want one with %q", what, got[what], w)
		}
	}
	if err := restoreAt(t, s, NarHash(pd), filepath.Join(t.TempDir(), "out")); err == nil || !strings.Contains(err.Error(), "not zero") {
		t.Errorf("restore of the padded NAR: %v", err)
	}
}
