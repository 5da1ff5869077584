package record

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func mustDigest(s string) Digest { return DigestOf([]byte(s)) }

// sampleRecord builds a record; reversed appends every set in the opposite
// order and uses other time zones, which must not change the encoding.
func sampleRecord(reversed bool) *Record {
	zone := time.UTC
	if reversed {
		zone = time.FixedZone("X", 5*3600+1800)
	}
	t0 := time.Date(2025, 3, 4, 5, 6, 7, 890123000, time.UTC).In(zone)
	console := mustDigest("console")
	parent := IDOf([]byte("parent"))
	inputs := []Input{
		{Name: "data", Kind: "http", Source: "https://example.invalid/d.csv", Format: FormatFile, Digest: mustDigest("data"), Size: 4},
		{Name: "code", Kind: "git", Source: "git::file:///src", Commit: strings.Repeat("a", 40), Format: FormatNAR, Digest: mustDigest("code"), Size: 120},
	}
	mkStep := func(name string, outs []Output) Step {
		in := map[string]Digest{}
		keys := []string{"data", "code"}
		if reversed {
			keys = []string{"code", "data"}
		}
		for _, k := range keys {
			in[k] = mustDigest(k)
		}
		return Step{
			Name: name, Isolation: "vm", Hypervisor: "qemu", Accel: "tcg",
			Closure: []StorePath{
				{Path: "/nix/store/b-busybox", NarHash: NarHash(mustDigest("b")), NarSize: 10},
				{Path: "/nix/store/a-env", NarHash: NarHash(mustDigest("a")), NarSize: 20},
			},
			Inputs: in, JobDigest: mustDigest("job " + name),
			Started: t0, Finished: t0.Add(1500 * time.Millisecond),
			Status: StatusSucceeded, ExitCode: 0,
			Usage:   Usage{PeakMemoryBytes: 1 << 20, CPUTimeNs: 12345, PidsPeak: 3, ThrottledNs: 7},
			Logs:    Logs{Stdout: mustDigest("out " + name), Stderr: mustDigest("err " + name), Console: &console},
			Outputs: outs,
		}
	}
	outs := []Output{
		{Path: "out/b", NarHash: NarHash(mustDigest("nb")), NarSize: 128},
		{Path: "out/a", NarHash: NarHash(mustDigest("na")), NarSize: 112},
	}
	steps := []Step{mkStep("train", outs), mkStep("eval <&> \"quoted\"", nil)}
	if reversed {
		inputs[0], inputs[1] = inputs[1], inputs[0]
		steps[0], steps[1] = steps[1], steps[0]
		outs[0], outs[1] = outs[1], outs[0]
		steps[1].Outputs = outs
		for i := range steps {
			c := steps[i].Closure
			c[0], c[1] = c[1], c[0]
		}
	}
	return &Record{
		Version: Version, ToolVersion: "0.1.0-test",
		Workflow: Workflow{Name: "pipeline", FileDigest: mustDigest("wf"), CanonicalHash: mustDigest("canon")},
		Policy: &Policy{DecisionID: "d-1", BundleDigest: "sha256:00", InputDigest: "sha256:11", Allowed: true,
			Warn: map[bool][]string{false: {"w1", "w2"}, true: {"w2", "w1"}}[reversed], EvalTimeNs: 25000},
		Host:    Host{Kernel: "6.1.0", Arch: "amd64", CgroupMode: "hybrid", KVMUsable: false},
		Started: t0, Finished: t0.Add(2 * time.Second),
		Status: StatusSucceeded, Parent: &parent,
		Inputs: inputs, Steps: steps,
	}
}

func TestIDRoundTrip(t *testing.T) {
	id := IDOf([]byte("hello"))
	s := id.String()
	if len(s) != 52 {
		t.Fatalf("len(%q) = %d, want 52", s, len(s))
	}
	back, err := ParseID(s)
	if err != nil || back != id {
		t.Fatalf("ParseID(%q) = %v, %v; want %v", s, back, err, id)
	}
}

func TestParseIDRejects(t *testing.T) {
	good := IDOf([]byte("x")).String()
	for name, s := range map[string]string{
		"empty":        "",
		"short":        good[:51],
		"long":         good + "0",
		"letter e":     "e" + good[1:],
		"letter u":     good[:10] + "u" + good[11:],
		"uppercase":    upperFirstLetter(good),
		"hex sha256":   DigestOf([]byte("x")).Hex(),
		"padding bits": "z" + good[1:], // the first character carries 4 bits of padding
	} {
		if _, err := ParseID(s); err == nil {
			t.Errorf("%s: ParseID(%q) accepted", name, s)
		}
	}
}

func upperFirstLetter(s string) string {
	i := strings.IndexAny(s, "abcdfghijklmnpqrsvwxyz")
	return s[:i] + strings.ToUpper(s[i:i+1]) + s[i+1:]
}

func TestDigestAndNarHashSpellings(t *testing.T) {
	d := mustDigest("x")
	if got, err := ParseDigest(d.String()); err != nil || got != d {
		t.Fatalf("ParseDigest(String) = %v, %v", got, err)
	}
	if got, err := ParseDigest(d.Hex()); err != nil || got != d {
		t.Fatalf("ParseDigest(Hex) = %v, %v", got, err)
	}
	if _, err := ParseDigest(strings.ToUpper(d.Hex())); err == nil {
		t.Fatal("ParseDigest accepted uppercase hex")
	}
	h := NarHash(d)
	for _, s := range []string{h.String(), h.NixBase32()} {
		if got, err := ParseNarHash(s); err != nil || got != h {
			t.Fatalf("ParseNarHash(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseNarHash(d.Hex()); err == nil {
		t.Fatal("ParseNarHash accepted bare hex")
	}
}

func TestCanonicalEncoding(t *testing.T) {
	a, err := Encode(sampleRecord(false))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Encode(sampleRecord(true))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatalf("equal records encode differently:\n%s\n%s", a, b)
	}
	if bytes.ContainsAny(a, " \n\t") && bytes.Contains(a, []byte("\n")) {
		t.Fatalf("encoding has a newline: %s", a)
	}
	if !bytes.Contains(a, []byte(`eval <&> \"quoted\"`)) {
		t.Fatalf("HTML characters escaped or quotes wrong: %s", a)
	}
	if !bytes.Contains(a, []byte(`"started":"2025-03-04T05:06:07.890123Z"`)) {
		t.Fatalf("time not in UTC RFC 3339 with nanoseconds: %s", a)
	}
	golden := filepath.Join("testdata", "record.golden.json")
	if *update {
		if err := os.WriteFile(golden, a, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./record -run TestCanonicalEncoding -update)", err)
	}
	if !bytes.Equal(a, want) {
		t.Fatalf("encoding changed; this changes every record id. If intended, bump Version and run -update.\ngot  %s\nwant %s", a, want)
	}
	r, err := Decode(a)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Encode(r)
	if err != nil || !bytes.Equal(again, a) {
		t.Fatalf("round trip changed bytes: %v\n%s", err, again)
	}
}

func TestEncodeDoesNotChangeInput(t *testing.T) {
	r := sampleRecord(true)
	first := r.Steps[0].Name
	if _, err := Encode(r); err != nil {
		t.Fatal(err)
	}
	if r.Steps[0].Name != first || r.Started.Location() == time.UTC {
		t.Fatal("Encode modified its argument")
	}
}

func TestDecodeRejectsNonCanonical(t *testing.T) {
	good, err := Encode(sampleRecord(false))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"leading space":  append([]byte(" "), good...),
		"trailing nl":    append(append([]byte{}, good...), '\n'),
		"unknown field":  bytes.Replace(good, []byte(`{"finished"`), []byte(`{"extra":1,"finished"`), 1),
		"duplicate key":  bytes.Replace(good, []byte(`"status":"succeeded"`), []byte(`"status":"failed","status":"succeeded"`), 1),
		"float":          bytes.Replace(good, []byte(`"narSize":10`), []byte(`"narSize":10.0`), 1),
		"null list":      bytes.Replace(good, []byte(`"outputs":[]`), []byte(`"outputs":null`), 1),
		"other version":  bytes.Replace(good, []byte(`"version":1`), []byte(`"version":2`), 1),
		"local time":     bytes.Replace(good, []byte(`07.890123Z`), []byte(`07.890123+00:00`), 1),
		"bare hex":       bytes.Replace(good, []byte(`"sha256:`), []byte(`"`), 1),
		"escaped letter": bytes.Replace(good, []byte(`"pipeline"`), []byte(`"\u0070ipeline"`), 1),
		"not json":       []byte("{"),
		"no version":     []byte(`{}`),
	} {
		if bytes.Equal(b, good) {
			t.Fatalf("%s: the mutation did not apply", name)
		}
		if _, err := Decode(b); err == nil {
			t.Errorf("%s: Decode accepted %s", name, b)
		}
	}
}

func TestEncodeRejectsUnencodableTime(t *testing.T) {
	r := sampleRecord(false)
	r.Started = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := Encode(r); err == nil {
		t.Fatal("Encode accepted a year past 9999")
	}
}

func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// putWithBlobs stores r with every blob it references, so Verify passes.
func putWithBlobs(t *testing.T, s *Store) (ID, *Record) {
	t.Helper()
	r := sampleRecord(false)
	put := func(content string) Digest {
		d, _, err := s.PutBlob(strings.NewReader(content))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	r.Workflow.FileDigest = put("name: pipeline\n")
	for i := range r.Inputs {
		r.Inputs[i].Digest = put("input " + r.Inputs[i].Name)
	}
	outDir := t.TempDir()
	for i := range r.Steps {
		st := &r.Steps[i]
		st.JobDigest = put(`{"step":"` + st.Name + `"}`)
		st.Logs = Logs{Stdout: put("stdout of " + st.Name), Stderr: put("")}
		for j := range st.Outputs {
			p := filepath.Join(outDir, st.Name, st.Outputs[j].Path)
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(p, "f"), []byte(p), 0o644); err != nil {
				t.Fatal(err)
			}
			h, n, err := s.PutNAR(p)
			if err != nil {
				t.Fatal(err)
			}
			st.Outputs[j].NarHash, st.Outputs[j].NarSize = h, n
		}
	}
	id, err := s.Put(r)
	if err != nil {
		t.Fatal(err)
	}
	return id, r
}

func TestStorePutGetVerify(t *testing.T) {
	s := newStore(t)
	id, r := putWithBlobs(t, s)
	again, err := s.Put(r)
	if err != nil || again != id {
		t.Fatalf("second Put = %v, %v; want %v", again, err, id)
	}
	got, err := s.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Workflow != r.Workflow || len(got.Steps) != 2 {
		t.Fatalf("Get returned %+v", got)
	}
	raw, err := s.GetRaw(id)
	if err != nil || IDOf(raw) != id {
		t.Fatalf("GetRaw: %v", err)
	}
	problems, err := s.Verify(id)
	if err != nil || len(problems) != 0 {
		t.Fatalf("Verify of an intact record = %v, %v", problems, err)
	}
}

// flipByte changes one byte of a read-only file in place.
func flipByte(t *testing.T, path string, at int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if at < 0 {
		at += len(b)
	}
	b[at] ^= 0x01
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTamperedRecordIsCaught(t *testing.T) {
	s := newStore(t)
	id, _ := putWithBlobs(t, s)
	b, err := os.ReadFile(s.RecordPath(id))
	if err != nil {
		t.Fatal(err)
	}
	// Change a digit of the exit code: still valid, canonical JSON.
	at := bytes.Index(b, []byte(`"exitCode":0`)) + len(`"exitCode":`)
	flipByte(t, s.RecordPath(id), at)
	_, err = s.Get(id)
	if !errors.Is(err, ErrHashMismatch) || !strings.Contains(err.Error(), "hash mismatch") ||
		!strings.Contains(err.Error(), id.String()) || !strings.Contains(err.Error(), s.RecordPath(id)) {
		t.Fatalf("Get of a tampered record: %v; want a hash mismatch naming the id and file", err)
	}
	problems, err := s.Verify(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || problems[0].What != "record" || !errors.Is(problems[0].Err, ErrHashMismatch) {
		t.Fatalf("Verify of a tampered record = %v", problems)
	}
	list, err := s.List()
	if err != nil || len(list) != 1 || list[0].Problem == "" {
		t.Fatalf("List of a tampered record = %+v, %v; want it listed with a problem", list, err)
	}
}

func TestTamperedBlobIsNamed(t *testing.T) {
	s := newStore(t)
	id, r := putWithBlobs(t, s)
	var train Step
	for _, st := range r.Steps {
		if st.Name == "train" {
			train = st
		}
	}
	flipByte(t, s.BlobPath(train.Logs.Stdout), 0)
	out := train.Outputs[0]
	flipByte(t, s.BlobPath(out.NarHash.Blob()), -1)
	if err := os.Remove(s.BlobPath(r.Workflow.FileDigest)); err != nil {
		t.Fatal(err)
	}
	problems, err := s.Verify(id)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{
		"step train: stdout log " + train.Logs.Stdout.String(),
		"step train: output " + out.Path + " " + out.NarHash.String(),
		"workflow file " + r.Workflow.FileDigest.String(),
	} {
		if !strings.Contains(all, want) {
			t.Errorf("Verify problems do not name %q:\n%s", want, all)
		}
	}
	if len(problems) != 3 {
		t.Errorf("Verify found %d problems, want 3:\n%s", len(problems), all)
	}
	if !strings.Contains(all, "hash mismatch") || !strings.Contains(all, "blob missing") {
		t.Errorf("problems do not say what is wrong:\n%s", all)
	}
	// The tampered NAR cannot be exported, and nothing is left at the target.
	dst := filepath.Join(t.TempDir(), "out")
	if err := restoreAt(t, s, out.NarHash, dst); !errors.Is(err, ErrHashMismatch) {
		t.Fatalf("RestoreNAR of a tampered NAR: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(dst)); len(entries) != 0 {
		t.Fatalf("RestoreNAR left a partial output behind: %v", entries)
	}
}

type crash struct{}

func TestInterruptedWriteLeavesNoRecord(t *testing.T) {
	s := newStore(t)
	s.afterTempWrite = func() { panic(crash{}) }
	r := sampleRecord(false)
	func() {
		defer func() {
			if p := recover(); p != (crash{}) {
				t.Fatalf("recovered %v, want the simulated crash", p)
			}
		}()
		s.Put(r)
	}()
	ents, _ := os.ReadDir(filepath.Join(s.Dir(), "records"))
	if len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), tmpPrefix) {
		t.Fatalf("after the crash records/ holds %v; want just the temp file", ents)
	}
	list, err := s.List()
	if err != nil || len(list) != 0 {
		t.Fatalf("List after a crash = %+v, %v; want nothing", list, err)
	}
	b, _ := Encode(r)
	if _, err := s.Get(IDOf(b)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after a crash: %v; want not found", err)
	}
	s.afterTempWrite = nil
	id, err := s.Put(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(id); err != nil {
		t.Fatalf("Get after a retried Put: %v", err)
	}
}

func TestResolveAndList(t *testing.T) {
	s := newStore(t)
	byFirst := map[byte][]ID{}
	var ambiguous byte
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; ambiguous == 0; i++ {
		r := sampleRecord(false)
		r.Started = base.Add(time.Duration(i) * time.Minute)
		r.Finished = r.Started.Add(2 * time.Second)
		id, err := s.Put(r)
		if err != nil {
			t.Fatal(err)
		}
		c := id.String()[0]
		byFirst[c] = append(byFirst[c], id)
		if len(byFirst[c]) == 2 {
			ambiguous = c
		}
	}
	if _, err := s.Resolve(string(ambiguous)); !errors.Is(err, ErrAmbiguous) ||
		!strings.Contains(err.Error(), byFirst[ambiguous][0].String()) {
		t.Fatalf("Resolve of an ambiguous prefix: %v", err)
	}
	id := byFirst[ambiguous][1]
	if got, err := s.Resolve(id.String()[:12]); err != nil || got != id {
		t.Fatalf("Resolve(12 chars) = %v, %v", got, err)
	}
	if got, err := s.Resolve(id.String()); err != nil || got != id {
		t.Fatalf("Resolve(full) = %v, %v", got, err)
	}
	missing := "0000000000"
	if _, ok := byFirst['0']; ok {
		missing = "zzzzzzzzzz"
	}
	if _, err := s.Resolve(missing); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Resolve of an unknown prefix: %v", err)
	}
	if _, err := s.Resolve("abce"); err == nil || !strings.Contains(err.Error(), "Nix base32") {
		t.Fatalf("Resolve with a bad character: %v", err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir(), "records", "README.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, ids := range byFirst {
		total += len(ids)
	}
	if len(list) != total {
		t.Fatalf("List has %d entries, want %d", len(list), total)
	}
	for i := 1; i < len(list); i++ {
		if list[i].Started.After(list[i-1].Started) {
			t.Fatalf("List not newest first at %d: %v after %v", i, list[i].Started, list[i-1].Started)
		}
	}
	if list[0].Workflow != "pipeline" || list[0].Duration != 2*time.Second || list[0].Status != StatusSucceeded {
		t.Fatalf("summary = %+v", list[0])
	}
}

func TestBlobDedupAndVerifyOnRead(t *testing.T) {
	s := newStore(t)
	d1, n, err := s.PutBlob(strings.NewReader("same"))
	if err != nil || n != 4 {
		t.Fatal(n, err)
	}
	d2, _, err := s.PutBlob(strings.NewReader("same"))
	if err != nil || d1 != d2 {
		t.Fatal(d2, err)
	}
	ents, _ := os.ReadDir(filepath.Dir(s.BlobPath(d1)))
	if len(ents) != 1 {
		t.Fatalf("identical blobs stored %d times", len(ents))
	}
	if tmp, _ := filepath.Glob(filepath.Join(s.Dir(), "blobs", tmpPrefix+"*")); len(tmp) != 0 {
		t.Fatalf("temp files left: %v", tmp)
	}
	flipByte(t, s.BlobPath(d1), 0)
	if err := s.VerifyBlob(d1); !errors.Is(err, ErrHashMismatch) || !strings.Contains(err.Error(), s.BlobPath(d1)) {
		t.Fatalf("VerifyBlob of a changed blob: %v", err)
	}
	if _, err := s.OpenBlob(mustDigest("absent")); !errors.Is(err, ErrBlobMissing) {
		t.Fatalf("OpenBlob of an absent blob: %v", err)
	}
}

// makeTree builds a directory with everything NAR distinguishes.
func makeTree(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "tree")
	for _, d := range []string{"a/b", "empty"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]os.FileMode{"a/b/data.txt": 0o644, "run.sh": 0o755, "a/z": 0o600}
	for p, m := range files {
		if err := os.WriteFile(filepath.Join(root, p), []byte("content of "+p), m); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a/b/data.txt", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestNARRoundTripAndExport(t *testing.T) {
	s := newStore(t)
	root := makeTree(t)
	h, n, err := s.PutNAR(root)
	if err != nil {
		t.Fatal(err)
	}
	if n <= 0 || !s.HasBlob(h.Blob()) {
		t.Fatalf("PutNAR size %d, blob present %v", n, s.HasBlob(h.Blob()))
	}
	dst := filepath.Join(t.TempDir(), "restored")
	if err := restoreAt(t, s, h, dst); err != nil {
		t.Fatal(err)
	}
	h2, _, err := s.PutNAR(dst)
	if err != nil || h2 != h {
		t.Fatalf("restored tree hashes to %v, want %v (%v)", h2, h, err)
	}
	if err := restoreAt(t, s, h, dst); err == nil {
		t.Fatal("RestoreNAR overwrote an existing path")
	}
	if target, err := os.Readlink(filepath.Join(dst, "link")); err != nil || target != "a/b/data.txt" {
		t.Fatalf("symlink restored as %q, %v", target, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "run.sh")); err != nil || fi.Mode()&0o100 == 0 {
		t.Fatalf("executable bit lost: %v %v", fi, err)
	}

	id, r := putWithBlobs(t, s)
	exportDir := t.TempDir()
	paths, err := s.Export(id, openRestorer(t, exportDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 2 {
		t.Fatalf("Export restored %v", paths)
	}
	for _, st := range r.Steps {
		for _, o := range st.Outputs {
			got, _, err := s.PutNAR(filepath.Join(exportDir, st.Name, o.Path))
			if err != nil || got != o.NarHash {
				t.Fatalf("exported %s hashes to %v, record says %v (%v)", o.Path, got, o.NarHash, err)
			}
		}
	}
}

func TestNarHashEqualsNixHashPath(t *testing.T) {
	nix := testtier.Nix(t)
	s := newStore(t)
	root := makeTree(t)
	for _, p := range []string{root, filepath.Join(root, "run.sh"), filepath.Join(root, "empty")} {
		h, _, err := s.PutNAR(p)
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(nix, "--extra-experimental-features", "nix-command", "hash", "path", p).CombinedOutput()
		if err != nil {
			t.Fatalf("nix hash path %s: %v: %s", p, err, out)
		}
		want, err := ParseNarHash(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatalf("nix printed %q: %v", out, err)
		}
		if h != want {
			t.Errorf("%s: PutNAR = %s, nix hash path = %s", p, h, want)
		}
	}
}

func TestDefaultStateDir(t *testing.T) {
	if os.Geteuid() == 0 {
		if d, err := DefaultStateDir(); err != nil || d != "/var/lib/agentsandbox" {
			t.Fatalf("as root: %q, %v", d, err)
		}
		return
	}
	t.Setenv("XDG_STATE_HOME", "/x/state")
	if d, err := DefaultStateDir(); err != nil || d != "/x/state/agentsandbox" {
		t.Fatalf("with XDG_STATE_HOME: %q, %v", d, err)
	}
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "/home/u")
	if d, err := DefaultStateDir(); err != nil || d != "/home/u/.local/state/agentsandbox" {
		t.Fatalf("without XDG_STATE_HOME: %q, %v", d, err)
	}
}

func TestRefs(t *testing.T) {
	s := newStore(t)
	commit := strings.Repeat("c", 40)
	if _, ok, err := s.Ref("git", commit); ok || err != nil {
		t.Fatalf("Ref before PutRef: %v %v", ok, err)
	}
	d, _, err := s.PutBlob(strings.NewReader("tree"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutRef("git", commit, d); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.Ref("git", commit); !ok || err != nil || got != d {
		t.Fatalf("Ref = %v %v %v", got, ok, err)
	}
	if err := s.PutRef("git", "../x", d); err == nil {
		t.Fatal("PutRef accepted a path")
	}
}

// TestPureImports enforces the pure-core rule for this package.
func TestPureImports(t *testing.T) {
	goCmd := testtier.Command(t, "pure", "go", "the Go toolchain")
	out, err := exec.Command(goCmd, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v: %s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range []string{"/vmrunner", "/netns", "golang.org/x/sys/unix", "vishvananda/netlink", "vishvananda/netns"} {
			if strings.Contains(dep, bad) {
				t.Errorf("record imports %s; the pure core must not", dep)
			}
		}
	}
}
