package record

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/nix-community/go-nix/pkg/nar"
)

// tree is a small file tree for NAR fixtures: a value of "->target" is a
// symlink, "/" a directory, "x:..." an executable file, anything else a
// regular file's contents.
type tree map[string]string

func putTree(t *testing.T, s *Store, files tree) NarHash {
	t.Helper()
	root := filepath.Join(t.TempDir(), "out")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case v == "/":
			err = os.MkdirAll(p, 0o755)
		case strings.HasPrefix(v, "->"):
			err = os.Symlink(strings.TrimPrefix(v, "->"), p)
		case strings.HasPrefix(v, "x:"):
			err = os.WriteFile(p, []byte(strings.TrimPrefix(v, "x:")), 0o755)
		default:
			err = os.WriteFile(p, []byte(v), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	h, _, err := s.PutNAR(root)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestCompareOutputs(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a := putTree(t, s, tree{
		"same":          "same contents",
		"changed":       "one",
		"gone":          "removed later",
		"run.sh":        "x:#!/bin/sh\n",
		"plain":         "becomes executable",
		"link":          "->same",
		"retarget":      "->same",
		"dir/inner":     "inside",
		"was-file":      "a file",
		"a-b":           "sorts after a/ in a NAR",
		"a/z":           "z",
		"empty-dir/":    "/",
		"dir/sub/deep":  "deep",
		"was-dir/child": "child",
	})
	b := putTree(t, s, tree{
		"same":         "same contents",
		"changed":      "two!",
		"new":          "added",
		"run.sh":       "x:#!/bin/sh\n",
		"plain":        "x:becomes executable",
		"link":         "->same",
		"retarget":     "->changed",
		"dir/inner":    "inside",
		"was-file/":    "/",
		"a-b":          "sorts after a/ in a NAR",
		"a/z":          "z",
		"empty-dir/":   "/",
		"dir/sub/deep": "deep",
		"was-dir":      "->same",
	})
	d, err := s.CompareOutputs(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if d.Identical {
		t.Fatal("Identical for different outputs")
	}
	var got []string
	for _, f := range d.Files {
		got = append(got, f.Path+" "+f.Change+" "+f.TypeA+">"+f.TypeB)
	}
	want := []string{
		"changed modified regular>regular",
		"gone removed regular>",
		"new added >regular",
		"plain mode regular>executable",
		"retarget modified symlink>symlink",
		"was-dir type directory>symlink",
		"was-dir/child removed regular>",
		"was-file type regular>directory",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("files:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	ch := d.Files[0]
	if ch.SizeA != 3 || ch.SizeB != 4 || ch.DigestA == nil || *ch.DigestA != DigestOf([]byte("one")) || *ch.DigestB != DigestOf([]byte("two!")) {
		t.Errorf("modified file: %+v", ch)
	}
	if rt := d.Files[4]; rt.LinkA != "same" || rt.LinkB != "changed" {
		t.Errorf("retargeted symlink: %+v", rt)
	}
	if g := d.Files[1]; g.DigestB != nil || g.SizeB != 0 || g.DigestA == nil {
		t.Errorf("removed file: %+v", g)
	}

	same, err := s.CompareOutputs(a, a)
	if err != nil || !same.Identical || len(same.Files) != 0 {
		t.Fatalf("same output: %+v, %v", same, err)
	}
}

// An output may be a single file (its NAR's root is a regular file).
func TestCompareOutputsSingleFile(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	put := func(name, body string, mode os.FileMode) NarHash {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		h, _, err := s.PutNAR(p)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	a, b, c := put("a", "alpha", 0o644), put("b", "beta", 0o644), put("c", "beta", 0o755)
	d, err := s.CompareOutputs(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Files) != 1 || d.Files[0].Path != "." || d.Files[0].Change != ChangeModified {
		t.Fatalf("%+v", d)
	}
	d, err = s.CompareOutputs(b, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Files) != 1 || d.Files[0].Change != ChangeMode {
		t.Fatalf("%+v", d)
	}
}

func TestCompareOutputsErrors(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a := putTree(t, s, tree{"f": "one"})
	b := putTree(t, s, tree{"f": "two"})
	var missing NarHash
	missing[0] = 1
	if _, err := s.CompareOutputs(a, missing); !errors.Is(err, ErrBlobMissing) {
		t.Errorf("missing blob: %v", err)
	}
	// Damage b's blob: the comparison must not believe it.
	p := s.BlobPath(b.Blob())
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, 0o600)
	i := bytes.LastIndex(raw, []byte("two"))
	raw[i] = 'T'
	if err := os.WriteFile(p, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompareOutputs(a, b); !errors.Is(err, ErrHashMismatch) {
		t.Errorf("damaged blob: %v", err)
	}
	// A NAR cut short: the walk of the other stops midway, and neither
	// leaves the NAR reader's goroutine behind.
	big := putTree(t, s, tree{"a": "1", "b": "2", "c": "3", "d": "4"})
	whole, err := os.ReadFile(s.BlobPath(big.Blob()))
	if err != nil {
		t.Fatal(err)
	}
	cut, _, err := s.PutBlob(bytes.NewReader(whole[:len(whole)/2]))
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	for i := 0; i < 50; i++ {
		if _, err := s.CompareOutputs(big, NarHash(cut)); err == nil || !strings.Contains(err.Error(), "read nar") {
			t.Fatalf("truncated nar: %v", err)
		}
	}
	if after := runtime.NumGoroutine(); after >= before+50 {
		t.Errorf("%d goroutines before 50 comparisons that stopped early, %d after", before, after)
	}
	// A blob that is not a NAR.
	d, _, err := s.PutBlob(strings.NewReader("not a nar"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompareOutputs(a, NarHash(d)); err == nil || !strings.Contains(err.Error(), "read nar") {
		t.Errorf("not a nar: %v", err)
	}
}

// Differences beyond MaxOutputDiffFiles are counted, not listed.
func TestCompareOutputsOmitted(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	n := MaxOutputDiffFiles + 5
	h, _, err := s.PutNARFunc(func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		nw, err := nar.NewWriter(bw)
		if err != nil {
			return err
		}
		if err := nw.WriteHeader(&nar.Header{Path: "/", Type: nar.TypeDirectory}); err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if err := nw.WriteHeader(&nar.Header{Path: fmt.Sprintf("/f%06d", i), Type: nar.TypeSymlink, LinkTarget: "x"}); err != nil {
				return err
			}
		}
		if err := nw.Close(); err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		t.Fatal(err)
	}
	empty := putTree(t, s, tree{})
	d, err := s.CompareOutputs(empty, h)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Files) != MaxOutputDiffFiles || d.Omitted != 5 || d.Identical {
		t.Fatalf("files %d omitted %d", len(d.Files), d.Omitted)
	}
}

func TestCompareNARPaths(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"/a", "/a", 0},
		{"/a/b", "/a-c", -1},
		{"/a-c", "/a/b", 1},
		{"/", "/a", -1},
		{"/a", "/ab", -1},
		{"/b", "/a/z", 1},
	} {
		got := compareNARPaths(c.a, c.b)
		if (got < 0) != (c.want < 0) || (got > 0) != (c.want > 0) {
			t.Errorf("compareNARPaths(%q, %q) = %d, want sign of %d", c.a, c.b, got, c.want)
		}
		if got < 0 && !nar.PathIsLexicographicallyOrdered(c.a, c.b) {
			t.Errorf("compareNARPaths(%q, %q) = %d disagrees with the NAR order", c.a, c.b, got)
		}
	}
}

// FuzzCompareNARs: comparing any bytes never panics; a NAR compared with
// itself has no differences, and A against B lists as many as B against A.
func FuzzCompareNARs(f *testing.F) {
	var seeds [][]byte
	for _, files := range []tree{{"a": "1", "d/b": "x:2", "l": "->a"}, {"a": "2", "d/": "/"}} {
		root := filepath.Join(f.TempDir(), "out")
		os.Mkdir(root, 0o755)
		for name, v := range files {
			p := filepath.Join(root, name)
			os.MkdirAll(filepath.Dir(p), 0o755)
			switch {
			case v == "/":
				os.MkdirAll(p, 0o755)
			case strings.HasPrefix(v, "->"):
				os.Symlink(v[2:], p)
			case strings.HasPrefix(v, "x:"):
				os.WriteFile(p, []byte(v[2:]), 0o755)
			default:
				os.WriteFile(p, []byte(v), 0o644)
			}
		}
		var b bytes.Buffer
		if err := nar.DumpPath(&b, root); err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, b.Bytes())
		f.Add(b.Bytes())
	}
	walk := func(b []byte) *narWalk {
		w, err := newNARWalk(NarHash{}, io.NopCloser(bytes.NewReader(b)))
		if err != nil {
			return nil
		}
		return w
	}
	compare := func(a, b []byte) (OutputDiff, error) {
		wa := walk(a)
		if wa == nil {
			return OutputDiff{}, errors.New("not a nar")
		}
		defer wa.close()
		wb := walk(b)
		if wb == nil {
			return OutputDiff{}, errors.New("not a nar")
		}
		defer wb.close()
		return compareWalks(wa, wb)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		self, err := compare(b, b)
		if err != nil {
			return
		}
		if !self.Identical || len(self.Files) != 0 {
			t.Fatalf("a NAR against itself: %+v", self)
		}
		for _, other := range seeds {
			ab, err1 := compare(b, other)
			ba, err2 := compare(other, b)
			if (err1 == nil) != (err2 == nil) {
				t.Fatalf("errors differ: %v, %v", err1, err2)
			}
			if err1 == nil && len(ab.Files) != len(ba.Files) {
				t.Fatalf("%d differences one way, %d the other", len(ab.Files), len(ba.Files))
			}
		}
	})
}

// BenchmarkCompareOutputs compares two outputs of 200 files of 64 KiB
// (12.5 MiB each) that differ in one file; bytes are both NARs.
func BenchmarkCompareOutputs(b *testing.B) {
	s, err := OpenStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	var hashes [2]NarHash
	var size int64
	for i := range hashes {
		root := filepath.Join(b.TempDir(), "out")
		if err := os.Mkdir(root, 0o755); err != nil {
			b.Fatal(err)
		}
		body := bytes.Repeat([]byte("0123456789abcdef"), 4096)
		for f := 0; f < 200; f++ {
			content := body
			if f == 100 {
				content = append([]byte{byte('A' + i)}, body[1:]...)
			}
			if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%03d", f)), content, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		h, n, err := s.PutNAR(root)
		if err != nil {
			b.Fatal(err)
		}
		hashes[i], size = h, n
	}
	b.SetBytes(2 * size)
	b.ResetTimer()
	for range b.N {
		d, err := s.CompareOutputs(hashes[0], hashes[1])
		if err != nil || len(d.Files) != 1 {
			b.Fatalf("%d files differ, %v", len(d.Files), err)
		}
	}
}
