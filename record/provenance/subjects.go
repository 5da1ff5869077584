package provenance

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	intoto "github.com/in-toto/attestation/go/v1"
	"github.com/nix-community/go-nix/pkg/nar"

	"github.com/agentsandbox/agentsandbox/record"
)

// Problem is one thing that does not hold: What names it ("signature",
// "payload type", "subject build/out/model.bin", ...), Err says how.
type Problem struct {
	What string
	Err  error
}

func (p Problem) String() string { return p.What + ": " + p.Err.Error() }

// subjectSet maps a subject's name to its digest set.
type subjectSet map[string]map[string]string

// add records one digest of a subject. Two outputs of a step may overlap
// ("out" and "out/model.bin"): the same file then appears twice with the
// same bytes, and its digest sets merge.
func (ss subjectSet) add(name, alg, value string) error {
	d := ss[name]
	if d == nil {
		d = map[string]string{}
		ss[name] = d
	}
	if old, ok := d[alg]; ok && old != value {
		return fmt.Errorf("subject %q has two %s digests (%s and %s): two outputs name the same file with different contents", name, alg, old, value)
	}
	d[alg] = value
	return nil
}

func (ss subjectSet) descriptors() []*intoto.ResourceDescriptor {
	names := make([]string, 0, len(ss))
	for n := range ss {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]*intoto.ResourceDescriptor, 0, len(names))
	for _, n := range names {
		out = append(out, &intoto.ResourceDescriptor{Name: n, Digest: ss[n]})
	}
	return out
}

// Subjects returns the subjects of record r, sorted by name: each output
// as a whole, named "STEP/OUTPUT" with its NAR hash (DigestNAR), and each
// regular file in it, named "STEP/OUTPUT/relative/path" with the sha256 of
// its bytes (an output that is a single file has both digests under one
// name). The files are read by walking the output's NAR blob, which is
// verified against its hash; nothing on disk is followed. Symlinks and
// directories are not subjects of their own; the NAR hash covers them, and
// the executable bits. An output that cannot be read is a Problem naming
// it, and contributes no subjects.
func Subjects(s *record.Store, r *record.Record) ([]*intoto.ResourceDescriptor, []Problem) {
	ss := subjectSet{}
	w := newWalker()
	var problems []Problem
	for _, st := range r.Steps {
		for _, o := range st.Outputs {
			if o.NarHash == (record.NarHash{}) {
				continue
			}
			name := st.Name + "/" + o.Path
			one := subjectSet{}
			if err := w.output(s, name, o.NarHash, one); err != nil {
				problems = append(problems, Problem{What: "subject " + name, Err: err})
				continue
			}
			for n, d := range one {
				for alg, v := range d {
					if err := ss.add(n, alg, v); err != nil {
						problems = append(problems, Problem{What: "subject " + n, Err: err})
					}
				}
			}
		}
	}
	return ss.descriptors(), problems
}

// walker reads NARs with buffers it keeps from one to the next.
type walker struct {
	br  *bufio.Reader
	buf []byte
}

func newWalker() *walker {
	return &walker{br: bufio.NewReaderSize(nil, 32<<10), buf: make([]byte, 32<<10)}
}

// output adds the subjects of one output, named base, to ss.
func (w *walker) output(s *record.Store, base string, h record.NarHash, ss subjectSet) error {
	if err := ss.add(base, DigestNAR, hex.EncodeToString(h[:])); err != nil {
		return err
	}
	sum := sha256.New()
	err := w.nar(s, h, func(rel string, r io.Reader) error {
		sum.Reset()
		if _, err := io.CopyBuffer(sum, r, w.buf); err != nil {
			return err
		}
		name := base
		if rel != "" {
			name += "/" + rel
		}
		return ss.add(name, DigestSHA256, hex.EncodeToString(sum.Sum(nil)))
	})
	if err != nil {
		// A damaged blob may fail to parse before its hash is checked at
		// its end: say that it is damaged, not how the parser tripped.
		if verr := s.VerifyBlob(h.Blob()); verr != nil {
			return fmt.Errorf("read the NAR %s: %w", h, verr)
		}
		return fmt.Errorf("read the NAR %s: %w", h, err)
	}
	return nil
}

// nar calls file for every regular file in NAR blob h, with its path
// relative to the NAR's root ("" when the root is the file), then reads
// the blob to its end so that its hash is checked.
func (w *walker) nar(s *record.Store, h record.NarHash, file func(rel string, r io.Reader) error) error {
	blob, err := s.OpenBlob(h.Blob())
	if err != nil {
		return err
	}
	defer blob.Close()
	// The NAR reader reads a few bytes at a time: buffer it, or each is a
	// read(2).
	br := w.br
	br.Reset(blob)
	defer br.Reset(nil)
	nr, err := nar.NewReader(br)
	if err != nil {
		return err
	}
	defer nr.Close()
	for {
		hdr, err := nr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(hdr.Path, "/")
		if rel != "" && !filepath.IsLocal(rel) {
			return fmt.Errorf("entry %q leaves the output", hdr.Path)
		}
		if hdr.Type != nar.TypeRegular {
			continue
		}
		if err := file(rel, nr); err != nil {
			return err
		}
	}
	if _, err := io.CopyBuffer(io.Discard, br, w.buf); err != nil {
		return err
	}
	return nil
}
