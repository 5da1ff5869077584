package record

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestNamedBlobs: every blob a record names, a sandbox entry's action's
// blobs too, and nothing else of the store.
func TestNamedBlobs(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	put := func(b string) Digest {
		d, _, err := s.PutBlob(strings.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	wf, job, out, errs, file, other := put("wf"), put("job"), put("stdout"), put("stderr"), put("file bytes"), put("someone else's")
	raw, _ := json.Marshal(Action{Kind: "file_put", Path: "f", File: &file})
	act := put(string(raw))
	r := &Record{Workflow: Workflow{FileDigest: wf}, Steps: []Step{{JobDigest: job, Logs: Logs{Stdout: out, Stderr: errs}}},
		Sandbox: &Sandbox{Entries: []Entry{{Seq: 1, Kind: "file_put", Digest: act}}}}
	set := map[Digest]bool{}
	s.NamedBlobs(r, set)
	for _, d := range []Digest{wf, job, out, errs, act, file} {
		if !set[d] {
			t.Errorf("%s is not named", d)
		}
	}
	if set[other] || len(set) != 6 {
		t.Errorf("named %d blobs (another's: %v), want the record's 6", len(set), set[other])
	}
}

// TestResolveAmong: a prefix resolves among the kept records only, and an
// ambiguous one names none of the others.
func TestResolveAmong(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	owner := map[ID]string{}
	var ids []ID
	for i := range 40 {
		o := "a"
		if i%2 == 1 {
			o = "b"
		}
		at := time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)
		id, err := s.Put(&Record{Version: Version, Started: at, Finished: at, Owner: o})
		if err != nil {
			t.Fatal(err)
		}
		owner[id] = o
		ids = append(ids, id)
	}
	keepA := func(id ID) bool { return owner[id] == "a" }
	for _, id := range ids {
		got, err := s.ResolveAmong(id.String(), keepA)
		if owner[id] == "a" && (err != nil || got != id) {
			t.Errorf("a's %s: %v %v", id, got, err)
		}
		if owner[id] == "b" && err == nil {
			t.Errorf("b's %s resolved among a's", id)
		}
	}
	// A one-character prefix shared by records of both.
	for c := range strings.SplitSeq("0123456789abcdfghijklmnpqrsvwxyz", "") {
		_, err := s.ResolveAmong(c, keepA)
		for _, id := range ids {
			if owner[id] == "b" && err != nil && strings.Contains(err.Error(), id.String()) {
				t.Errorf("prefix %q: the error names b's record %s: %v", c, id, err)
			}
		}
	}
	if got, _ := s.Resolve(ids[1].String()); got != ids[1] {
		t.Error("Resolve without a filter")
	}
}
