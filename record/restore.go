package record

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/nix-community/go-nix/pkg/nar"
)

// RestoreDir is the directory a restore writes beneath: a record export,
// a workspace receiving inputs and needed outputs, a snapshot's scratch
// tree. Its methods take slash-separated paths relative to it, and an
// implementation must resolve every one beneath the directory without
// following a symlink, the last component included, and must never replace
// an entry that exists. That is what keeps a symlink an earlier entry or
// output restored (or a job planted) from redirecting a later write:
// restored symlinks are created as symlinks and never followed afterwards.
//
// The record package does not import the system calls this takes
// (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, renameat2
// RENAME_NOREPLACE); fsx/jobfs.Restorer implements it.
type RestoreDir interface {
	// Exists reports whether rel exists; a symlink on the way is an error.
	Exists(rel string) (bool, error)
	// MkdirAll makes rel and its missing parents; an existing directory is
	// fine, a symlink or a file in the way is an error.
	MkdirAll(rel string) error
	// Mkdir makes the new directory rel.
	Mkdir(rel string, perm fs.FileMode) error
	// Symlink makes the new symlink rel to target, stored as written.
	Symlink(target, rel string) error
	// Create creates the new regular file rel for writing.
	Create(rel string, perm fs.FileMode) (io.WriteCloser, error)
	// Rename moves from to to; an existing to is an error wrapping
	// fs.ErrExist, never replaced.
	Rename(from, to string) error
	// RemoveAll removes rel and all beneath it, a symlink itself and never
	// its target; a missing rel is not an error.
	RemoveAll(rel string) error
}

// ErrOutputLayout marks a record whose outputs cannot all be restored
// beneath one directory: two at one path, one inside another, or a step
// name or output path that is not a plain relative path.
var ErrOutputLayout = errors.New("outputs overlap or leave the directory they belong in")

// checkRel checks that rel is a clean, relative, slash-separated path that
// stays beneath the directory it is relative to.
func checkRel(rel string) error {
	switch {
	case rel == "":
		return errors.New("is empty")
	case strings.ContainsRune(rel, 0):
		return errors.New("contains a NUL byte")
	case strings.HasPrefix(rel, "/"):
		return errors.New("is absolute")
	case rel == "..", strings.HasPrefix(rel, "../"):
		return errors.New("leaves its directory with ..")
	case rel == ".":
		return errors.New("names the directory itself")
	case path.Clean(rel) != rel:
		return fmt.Errorf("is not a clean path (it cleans to %q: no '.', '..', empty or trailing components)", path.Clean(rel))
	}
	return nil
}

// RestoreNAR unpacks the stored NAR h at rel beneath dir. rel is a clean
// relative path that must not exist; missing parents are made, and a
// symlink among them is an error, never followed. The NAR is unpacked under
// a temporary name (.tmp-restore-*) beside rel and renamed into place
// (never over anything) only once every byte of it was read and its hash
// checked: a NAR that is damaged, cut short, over MaxOutputEntries entries
// or not a well-formed tree leaves nothing at rel.
//
// A well-formed tree is what Nix writes: every entry inside the directory
// entry before it, names in strictly increasing byte order, none empty,
// "." or "..". go-nix's reader lets through names that break this (see
// narTree); they are refused here.
func (s *Store) RestoreNAR(h NarHash, dir RestoreDir, rel string) error {
	if err := checkRel(rel); err != nil {
		return fmt.Errorf("restore nar %s at %q: the path %w", h, rel, err)
	}
	if exists, err := dir.Exists(rel); err != nil {
		return fmt.Errorf("restore nar %s at %s: %w", h, rel, err)
	} else if exists {
		return fmt.Errorf("restore nar %s: %s already exists: %w", h, rel, fs.ErrExist)
	}
	parent := path.Dir(rel)
	if parent != "." {
		if err := dir.MkdirAll(parent); err != nil {
			return fmt.Errorf("restore nar %s at %s: %w", h, rel, err)
		}
	}
	stage := path.Join(parent, tmpPrefix+"restore-"+rand.Text())
	if err := s.unpackNAR(h, dir, stage); err != nil {
		dir.RemoveAll(stage)
		return fmt.Errorf("restore nar %s at %s: %w", h, rel, err)
	}
	if err := dir.Rename(stage, rel); err != nil {
		dir.RemoveAll(stage)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("restore nar %s: %s already exists: %w", h, rel, err)
		}
		return fmt.Errorf("restore nar %s at %s: %w", h, rel, err)
	}
	return nil
}

// walkNAR reads the stored NAR h through, calling visit for each entry in
// order (for a regular file, with its contents to read): a NAR cut short,
// with too many entries, with bytes after its end, whose entries are not a
// well-formed tree, or not as Nix writes it (padCheck), fails, and a walk
// that stops early does not leave the NAR reader's goroutine behind. The
// verifying reader checks the hash of every byte.
func (s *Store) walkNAR(h NarHash, visit func(hdr *nar.Header, contents io.Reader) error) error {
	w, err := s.openNARWalk(h)
	if err != nil {
		return err
	}
	defer w.close()
	var tree narTree
	for {
		hdr, err := w.header()
		if err != nil {
			return err
		}
		if hdr == nil {
			break
		}
		if err := tree.add(hdr); err != nil {
			return fmt.Errorf("read nar %s: %w", h, err)
		}
		switch hdr.Type {
		case nar.TypeDirectory, nar.TypeSymlink, nar.TypeRegular:
		default:
			return fmt.Errorf("read nar %s: entry %q has unknown type %v", h, hdr.Path, hdr.Type)
		}
		if err := visit(hdr, w.nr); err != nil {
			return err
		}
	}
	if tree.n == 0 {
		return fmt.Errorf("read nar %s: no entries", h)
	}
	// The rest of the blob: bytes after the NAR's end are an error.
	return w.finish()
}

// unpackNAR writes the stored NAR h out at root (beneath dir) as walkNAR
// reads it.
func (s *Store) unpackNAR(h NarHash, dir RestoreDir, root string) error {
	buf := make([]byte, 32<<10)
	return s.walkNAR(h, func(hdr *nar.Header, contents io.Reader) error {
		p := root
		if hdr.Path != "/" {
			p = root + hdr.Path // checked by narTree.add: clean, absolute, inside
		}
		switch hdr.Type {
		case nar.TypeDirectory:
			return dir.Mkdir(p, 0o755)
		case nar.TypeSymlink:
			return dir.Symlink(hdr.LinkTarget, p)
		}
		mode := fs.FileMode(0o644)
		if hdr.Executable {
			mode = 0o755
		}
		f, err := dir.Create(p, mode)
		if err != nil {
			return err
		}
		if _, err := io.CopyBuffer(f, contents, buf); err != nil {
			f.Close()
			return fmt.Errorf("read nar %s: %w", h, err)
		}
		return f.Close()
	})
}

// CheckNAR reads the stored NAR h through as a restore would, writing
// nothing: it fails where a restore would (walkNAR).
func (s *Store) CheckNAR(h NarHash) error {
	buf := make([]byte, 32<<10)
	return s.walkNAR(h, func(hdr *nar.Header, contents io.Reader) error {
		if hdr.Type != nar.TypeRegular {
			return nil
		}
		if _, err := io.CopyBuffer(io.Discard, contents, buf); err != nil {
			return fmt.Errorf("read nar %s: %w", h, err)
		}
		return nil
	})
}

// narTree checks that a NAR's entries form a tree, each path once, in
// order. go-nix's reader builds each entry's path with path.Join, which
// cleans it, and refuses only names holding '/' or NUL: a name "" or "."
// comes out as its directory's path again, ".." as the directory's parent,
// and its order check lets a path equal to the one before it through, so a
// NAR could name one path twice (a symlink, then a directory or file at the
// same place). Every entry after the root must be a new child of a
// directory entry still open, its name after the names before it.
type narTree struct {
	dirs []string // the directory entries open, outermost first
	last []string // the last name seen in each
	n    int
}

func (t *narTree) add(hdr *nar.Header) error {
	p := hdr.Path
	t.n++
	if t.n == 1 {
		if p != "/" {
			return fmt.Errorf("first entry %q is not the root", p)
		}
	} else {
		if p == "/" || !strings.HasPrefix(p, "/") || path.Clean(p) != p {
			return fmt.Errorf("entry %q is not a new path beneath the root (a name \"\", \".\" or \"..\")", p)
		}
		parent, name := path.Dir(p), path.Base(p)
		for len(t.dirs) > 0 && t.dirs[len(t.dirs)-1] != parent {
			t.dirs, t.last = t.dirs[:len(t.dirs)-1], t.last[:len(t.last)-1]
		}
		if len(t.dirs) == 0 {
			return fmt.Errorf("entry %q is not inside a directory entry before it", p)
		}
		top := len(t.last) - 1
		if t.last[top] != "" && name <= t.last[top] {
			return fmt.Errorf("entry %q repeats or comes before %q in the same directory (names must be unique and sorted; \"\", \".\" and \"..\" are not names)", p, path.Join(parent, t.last[top]))
		}
		t.last[top] = name
	}
	if hdr.Type == nar.TypeDirectory {
		t.dirs, t.last = append(t.dirs, p), append(t.last, "")
	}
	return nil
}

// LayoutProblem is one output that cannot be restored beside the others:
// Err wraps ErrOutputLayout and says why.
type LayoutProblem struct {
	Step, Path string
	NarHash    NarHash
	Err        error
}

func (p LayoutProblem) Error() string {
	return fmt.Sprintf("step %q output %q: %v", p.Step, p.Path, p.Err)
}

func (p LayoutProblem) Unwrap() error { return p.Err }

// OutputLayout checks that every output of r can be restored at
// <step>/<output path> beneath one directory, as Export does: each step
// name one path component, each output path clean and relative, no two
// outputs at one path and none inside another (restoring both would write
// the inner one through whatever the outer one holds there, a symlink
// included). A record apply makes always passes: workflow outputs of a step
// may not nest, and step names are host names. It returns one problem per
// output that fails, in record order.
func OutputLayout(r *Record) []LayoutProblem {
	var problems []LayoutProblem
	bad := func(st Step, o Output, format string, args ...any) {
		problems = append(problems, LayoutProblem{Step: st.Name, Path: o.Path, NarHash: o.NarHash,
			Err: fmt.Errorf("%w: "+format, append([]any{ErrOutputLayout}, args...)...)})
	}
	type at struct{ step, path string }
	seen := map[string]at{}
	var valid []string
	var validOut []Output
	var validStep []Step
	for _, st := range r.Steps {
		stepErr := checkRel(st.Name)
		if stepErr == nil && strings.Contains(st.Name, "/") {
			stepErr = errors.New("holds '/': a step name is one path component")
		}
		for _, o := range st.Outputs {
			if stepErr != nil {
				bad(st, o, "the step name %v", stepErr)
				continue
			}
			if err := checkRel(o.Path); err != nil {
				bad(st, o, "the output path %v", err)
				continue
			}
			full := st.Name + "/" + o.Path
			if prev, dup := seen[full]; dup {
				bad(st, o, "output %q of step %q is at the same path", prev.path, prev.step)
				continue
			}
			seen[full] = at{st.Name, o.Path}
			valid, validOut, validStep = append(valid, full), append(validOut, o), append(validStep, st)
		}
	}
	for i, full := range valid {
		for j := len(validStep[i].Name) + 1; j < len(full); j++ {
			if full[j] != '/' {
				continue
			}
			if outer, ok := seen[full[:j]]; ok {
				bad(validStep[i], validOut[i], "it lies inside output %q of step %q, and outputs may not nest: restoring both would write this one through what the other holds there", outer.path, outer.step)
				break
			}
		}
	}
	return problems
}

// Export restores every output of record id from its NAR beneath dir, at
// <step>/<output path>, and returns those paths (slash-separated, relative
// to dir). A record whose outputs OutputLayout refuses is refused whole,
// before anything is written. Each NAR is checked against its hash before it
// appears (RestoreNAR); an existing target is an error, never overwritten,
// and nothing is written through a symlink, whether an earlier output
// restored it or it was there before.
func (s *Store) Export(id ID, dir RestoreDir) ([]string, error) {
	r, err := s.Get(id)
	if err != nil {
		return nil, fmt.Errorf("export %s: %w", id, err)
	}
	if problems := OutputLayout(r); len(problems) > 0 {
		more := ""
		if len(problems) > 1 {
			more = fmt.Sprintf(", and %d more outputs", len(problems)-1)
		}
		return nil, fmt.Errorf("export %s: nothing exported: %w%s (agentsandbox records verify %s lists each)", id, problems[0], more, id)
	}
	var done []string
	for _, st := range r.Steps {
		for _, o := range st.Outputs {
			rel := st.Name + "/" + o.Path
			if err := s.RestoreNAR(o.NarHash, dir, rel); err != nil {
				return done, fmt.Errorf("export %s: step %s output %s: %w", id, st.Name, o.Path, err)
			}
			done = append(done, rel)
		}
	}
	return done, nil
}
