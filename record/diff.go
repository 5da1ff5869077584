package record

import (
	"crypto/sha256"
	"fmt"
	"io"
	"strings"

	"github.com/nix-community/go-nix/pkg/nar"
)

// OutputDiff is how two stored outputs (NARs) differ, file by file.
type OutputDiff struct {
	// Identical is true when the NAR hashes are equal; Files is then empty.
	Identical bool `json:"identical"`
	// Files lists every path that differs, sorted by path (component by
	// component, as in a NAR), at most MaxOutputDiffFiles of them.
	Files []FileDiff `json:"files"`
	// Omitted counts the differences found beyond MaxOutputDiffFiles and
	// not listed.
	Omitted int `json:"omitted,omitempty"`
}

// FileDiff is one path that differs between two outputs. Path is relative
// to the output's root, "." for the root itself (an output that is a single
// file). Change is one of the FileChange values. Sizes, digests and link
// targets describe each side as it is: a side where the path is absent, or
// is not a regular file (digest, size) or a symlink (link), leaves them
// empty.
type FileDiff struct {
	Path    string  `json:"path"`
	Change  string  `json:"change"`
	TypeA   string  `json:"typeA,omitempty"` // regular, executable, directory or symlink
	TypeB   string  `json:"typeB,omitempty"`
	SizeA   int64   `json:"sizeA,omitempty"`
	SizeB   int64   `json:"sizeB,omitempty"`
	DigestA *Digest `json:"digestA,omitempty"` // sha256 of a regular file's contents
	DigestB *Digest `json:"digestB,omitempty"`
	LinkA   string  `json:"linkA,omitempty"`
	LinkB   string  `json:"linkB,omitempty"`
}

// The values of FileDiff.Change.
const (
	ChangeAdded    = "added"    // only in B
	ChangeRemoved  = "removed"  // only in A
	ChangeModified = "modified" // contents (or a symlink's target) differ
	ChangeType     = "type"     // file, directory and symlink swapped
	ChangeMode     = "mode"     // the executable bit alone differs
)

// Bounds on reading stored NARs. A NAR with more than MaxOutputEntries
// entries is refused (CompareOutputs, RestoreNAR); differences beyond
// MaxOutputDiffFiles are counted in Omitted, not listed.
const (
	MaxOutputEntries   = 4 << 20
	MaxOutputDiffFiles = 10000
)

// CompareOutputs compares the stored NARs a and b entry by entry. Both are
// read from the store verifying their hashes (OpenBlob) and walked side by
// side, in the NAR's own sorted order, so memory does not grow with their
// size: file contents stream through sha256 and are never held.
func (s *Store) CompareOutputs(a, b NarHash) (OutputDiff, error) {
	if a == b {
		return OutputDiff{Identical: true, Files: []FileDiff{}}, nil
	}
	wa, err := s.openNARWalk(a)
	if err != nil {
		return OutputDiff{}, fmt.Errorf("compare outputs %s and %s: %w", a, b, err)
	}
	defer wa.close()
	wb, err := s.openNARWalk(b)
	if err != nil {
		return OutputDiff{}, fmt.Errorf("compare outputs %s and %s: %w", a, b, err)
	}
	defer wb.close()
	d, err := compareWalks(wa, wb)
	if err != nil {
		return OutputDiff{}, fmt.Errorf("compare outputs %s and %s: %w", a, b, err)
	}
	return d, nil
}

func compareWalks(wa, wb *narWalk) (OutputDiff, error) {
	d := OutputDiff{Files: []FileDiff{}}
	add := func(f FileDiff) {
		if len(d.Files) < MaxOutputDiffFiles {
			d.Files = append(d.Files, f)
		} else {
			d.Omitted++
		}
	}
	ea, err := wa.next()
	if err != nil {
		return d, err
	}
	eb, err := wb.next()
	if err != nil {
		return d, err
	}
	for ea != nil || eb != nil {
		var c int
		switch {
		case ea == nil:
			c = 1
		case eb == nil:
			c = -1
		default:
			c = compareNARPaths(ea.path, eb.path)
		}
		switch {
		case c < 0:
			f := FileDiff{Path: ea.relPath(), Change: ChangeRemoved}
			ea.fillA(&f)
			add(f)
			if ea, err = wa.next(); err != nil {
				return d, err
			}
		case c > 0:
			f := FileDiff{Path: eb.relPath(), Change: ChangeAdded}
			eb.fillB(&f)
			add(f)
			if eb, err = wb.next(); err != nil {
				return d, err
			}
		default:
			if change := compareEntries(ea, eb); change != "" {
				f := FileDiff{Path: ea.relPath(), Change: change}
				ea.fillA(&f)
				eb.fillB(&f)
				add(f)
			}
			if ea, err = wa.next(); err != nil {
				return d, err
			}
			if eb, err = wb.next(); err != nil {
				return d, err
			}
		}
	}
	// Drain both blobs so the verifying readers check every byte's hash.
	if err := wa.finish(); err != nil {
		return d, err
	}
	if err := wb.finish(); err != nil {
		return d, err
	}
	// Two different NAR hashes with no entry differing cannot both verify.
	d.Identical = len(d.Files) == 0 && d.Omitted == 0
	return d, nil
}

func compareEntries(a, b *narEntry) string {
	switch {
	case a.typ != b.typ:
		return ChangeType
	case a.typ == nar.TypeRegular && (a.digest != b.digest || a.size != b.size):
		return ChangeModified
	case a.typ == nar.TypeSymlink && a.link != b.link:
		return ChangeModified
	case a.exec != b.exec:
		return ChangeMode
	}
	return ""
}

// compareNARPaths orders paths as a NAR lists them: component by component,
// so "/a/b" sorts before "/a-c" ('/' ends a component and sorts first).
func compareNARPaths(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] == b[i] {
			continue
		}
		switch {
		case a[i] == '/':
			return -1
		case b[i] == '/':
			return 1
		case a[i] < b[i]:
			return -1
		default:
			return 1
		}
	}
	return len(a) - len(b)
}

// narEntry is one entry of a NAR, its contents reduced to their sha256.
type narEntry struct {
	path   string
	typ    nar.NodeType
	exec   bool
	size   int64
	digest Digest
	link   string
}

func (e *narEntry) relPath() string {
	if p := strings.TrimPrefix(e.path, "/"); p != "" {
		return p
	}
	return "."
}

func (e *narEntry) typeName() string {
	if e.typ == nar.TypeRegular && e.exec {
		return "executable"
	}
	return string(e.typ)
}

func (e *narEntry) fillA(f *FileDiff) {
	f.TypeA = e.typeName()
	switch e.typ {
	case nar.TypeRegular:
		d := e.digest
		f.SizeA, f.DigestA = e.size, &d
	case nar.TypeSymlink:
		f.LinkA = e.link
	}
}

func (e *narEntry) fillB(f *FileDiff) {
	f.TypeB = e.typeName()
	switch e.typ {
	case nar.TypeRegular:
		d := e.digest
		f.SizeB, f.DigestB = e.size, &d
	case nar.TypeSymlink:
		f.LinkB = e.link
	}
}

// next returns the next entry, its contents hashed, or nil at the end of
// the NAR.
func (w *narWalk) next() (*narEntry, error) {
	hdr, err := w.header()
	if hdr == nil || err != nil {
		return nil, err
	}
	e := &narEntry{path: hdr.Path, typ: hdr.Type, exec: hdr.Executable, link: hdr.LinkTarget}
	switch hdr.Type {
	case nar.TypeRegular:
		sum := sha256.New()
		if w.buf == nil {
			w.buf = make([]byte, 32<<10)
		}
		n, err := io.CopyBuffer(sum, w.nr, w.buf)
		if err != nil {
			return nil, fmt.Errorf("read nar %s: %s: %w", w.h, e.relPath(), err)
		}
		e.size = n
		sum.Sum(e.digest[:0])
	case nar.TypeDirectory, nar.TypeSymlink:
	default:
		return nil, fmt.Errorf("read nar %s: entry %q has unknown type %q", w.h, hdr.Path, hdr.Type)
	}
	return e, nil
}
