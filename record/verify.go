package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// Problem is one thing Verify found wrong.
type Problem struct {
	What   string // "record", "workflow file", "step build: stdout log", "step build: output out/model", "input data"
	Digest string // the hash that was expected, in its usual spelling
	Path   string // the file that holds (or should hold) the bytes
	Err    error  // wraps ErrHashMismatch, ErrBlobMissing or an I/O error
}

func (p Problem) String() string {
	return fmt.Sprintf("%s %s (%s): %v", p.What, p.Digest, p.Path, p.Err)
}

// Verify re-hashes record id and every blob it references: the workflow
// file, each input, each step's job spec, logs and outputs, and the policy
// decision log (which must hold the record's admission decision), and a
// sandbox's entries with their blobs; a snapshot's tree is checked while
// the store holds it (it is collected once no running sandbox needs it). It
// returns one Problem per mismatch or missing blob, naming it; none means
// the record and its blobs are exactly as written. An output's NAR is read
// through as a restore would read it (CheckNAR): one that is not a
// well-formed tree, or not as Nix writes it, is a Problem. Outputs that
// cannot all be restored beneath one directory (OutputLayout: nested, at
// one path, or leaving it) are a Problem each, wrapping ErrOutputLayout,
// with the record's file as its Path. Zero digests mean "not present"
// (a step that never ran has no logs) and are not checked. Closures live in
// the Nix store and are not checked here.
//
// The error is for failures to look at all, such as an unknown id.
func (s *Store) Verify(id ID) ([]Problem, error) {
	r, err := s.Get(id)
	if errors.Is(err, ErrHashMismatch) || (err != nil && !errors.Is(err, ErrNotFound) && fileExists(s.RecordPath(id))) {
		return []Problem{{What: "record", Digest: id.String(), Path: s.RecordPath(id), Err: err}}, nil
	}
	if err != nil {
		return nil, err
	}
	var problems []Problem
	checked := map[Digest]error{}
	checkWith := func(what string, d Digest, spelled string, verify func() error) {
		if d.IsZero() {
			return
		}
		err, seen := checked[d]
		if !seen {
			err = verify()
			checked[d] = err
		}
		if err != nil {
			problems = append(problems, Problem{What: what, Digest: spelled, Path: s.BlobPath(d), Err: err})
		}
	}
	check := func(what string, d Digest, spelled string) {
		checkWith(what, d, spelled, func() error { return s.VerifyBlob(d) })
	}
	check("workflow file", r.Workflow.FileDigest, r.Workflow.FileDigest.String())
	if r.Workflow.Lock != nil {
		check("flake lock", *r.Workflow.Lock, r.Workflow.Lock.String())
	}
	for _, in := range r.Inputs {
		check("input "+in.Name, in.Digest, in.Digest.String())
	}
	for _, st := range r.Steps {
		pre := "step " + st.Name + ": "
		check(pre+"job spec", st.JobDigest, st.JobDigest.String())
		check(pre+"stdout log", st.Logs.Stdout, st.Logs.Stdout.String())
		check(pre+"stderr log", st.Logs.Stderr, st.Logs.Stderr.String())
		if st.Logs.Console != nil {
			check(pre+"console log", *st.Logs.Console, st.Logs.Console.String())
		}
		for _, o := range st.Outputs {
			// An output is a NAR that export must be able to restore:
			// read it through as a restore would.
			checkWith(pre+"output "+o.Path, o.NarHash.Blob(), o.NarHash.String(), func() error { return s.CheckNAR(o.NarHash) })
		}
		if st.Network != nil {
			check(pre+"network log", st.Network.Log, st.Network.Log.String())
		}
	}
	for _, p := range OutputLayout(r) {
		problems = append(problems, Problem{What: "step " + p.Step + ": output " + p.Path, Digest: p.NarHash.String(), Path: s.RecordPath(id), Err: p.Err})
	}
	if r.Policy != nil && r.Policy.DecisionLog != nil {
		check("policy decision log", *r.Policy.DecisionLog, r.Policy.DecisionLog.String())
		if checked[*r.Policy.DecisionLog] == nil {
			if err := s.checkDecisionLog(r.Policy); err != nil {
				problems = append(problems, Problem{What: "policy decision log", Digest: r.Policy.DecisionLog.String(), Path: s.BlobPath(*r.Policy.DecisionLog), Err: err})
			}
		}
	}
	if r.Sandbox != nil {
		for _, e := range r.Sandbox.Entries {
			what := fmt.Sprintf("sandbox entry %d (%s)", e.Seq, e.Kind)
			check(what, e.Digest, e.Digest.String())
			if checked[e.Digest] != nil {
				continue
			}
			a, err := s.Action(e.Digest)
			if err != nil {
				problems = append(problems, Problem{What: what, Digest: e.Digest.String(), Path: s.BlobPath(e.Digest), Err: err})
				continue
			}
			for name, d := range a.Blobs() {
				// A snapshot's tree is kept while its sandbox runs, then
				// collected: the record keeps its hash, and it is checked
				// while the store has it.
				if name == "file" && SnapshotTree(e.Kind) && !s.HasBlob(d) {
					continue
				}
				check(what+" "+name, d, d.String())
			}
		}
	}
	return problems, nil
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// Action reads a sandbox entry's content from its blob, verified.
func (s *Store) Action(d Digest) (*Action, error) {
	rc, err := s.OpenBlob(d)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	const max = 1 << 20 // actions are a few hundred bytes
	b, err := io.ReadAll(io.LimitReader(rc, max+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, fmt.Errorf("sandbox entry %s: over %d bytes, not an action", d, max)
	}
	if _, err := io.Copy(io.Discard, rc); err != nil { // the hash check at the end
		return nil, err
	}
	var a Action
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("sandbox entry %s: %w", d, err)
	}
	return &a, nil
}
