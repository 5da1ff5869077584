package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// copyRecord is a deep copy of r, through its encoding.
func copyRecord(t *testing.T, r *Record) *Record {
	t.Helper()
	raw, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func stepNamed(t *testing.T, r *Record, name string) *Step {
	t.Helper()
	for i := range r.Steps {
		if r.Steps[i].Name == name {
			return &r.Steps[i]
		}
	}
	t.Fatalf("no step %q", name)
	return nil
}

// changedRecord is sampleRecord with something changed in every section.
func changedRecord(t *testing.T) (a, b *Record) {
	a = copyRecord(t, sampleRecord(false))
	b = copyRecord(t, a)
	b.ToolVersion = "0.2.0-test"
	b.Status, b.Error = StatusFailed, ""
	b.Finished = b.Finished.Add(250 * time.Millisecond)
	b.Workflow.FileDigest = mustDigest("wf2")
	b.Workflow.CanonicalHash = mustDigest("canon2")
	b.Policy.Allowed = false
	b.Policy.Deny = []string{"step \"train\": vcpu 64 exceeds 8"}
	b.Policy.Warn = []string{"w1", "w3"}
	b.Policy.EvalTimeNs = 30000
	b.Host.Kernel = "6.6.0"
	a.Host.Nix, b.Host.Nix = "nix (Nix) 2.8.0", "nix (Nix) 2.26.3" // the Nix that realised the closures
	var data Input
	for _, in := range b.Inputs {
		if in.Name == "data" {
			data = in
		}
	}
	data.Digest, data.Size = mustDigest("data2"), 2048
	b.Inputs = []Input{data, {Name: "extra", Kind: "file", Source: "file://x", Format: FormatFile, Digest: mustDigest("x"), Size: 1}}
	st := stepNamed(t, b, "train")
	st.Status, st.ExitCode = StatusFailed, 1
	st.Accel = "kvm"
	st.Closure = []StorePath{
		{Path: "/nix/store/a-env", NarHash: NarHash(mustDigest("a2")), NarSize: 20},
		{Path: "/nix/store/c-python", NarHash: NarHash(mustDigest("c")), NarSize: 30},
	}
	st.Inputs["code"] = mustDigest("code2")
	st.Logs.Stdout = mustDigest("out train 2")
	st.Finished = st.Finished.Add(120 * time.Millisecond)
	st.Usage.PeakMemoryBytes = 3 << 19
	st.Usage.CPUTimeNs = 2345678
	st.Usage.PidsPeak = 4
	st.Outputs = []Output{
		{Path: "out/a", NarHash: NarHash(mustDigest("na2")), NarSize: 2000},
		{Path: "out/c", NarHash: NarHash(mustDigest("nc")), NarSize: 96},
	}
	var kept []Step
	for _, s := range b.Steps {
		if s.Name != "eval <&> \"quoted\"" {
			kept = append(kept, s)
		}
	}
	b.Steps = append(kept, Step{Name: "report", Isolation: "namespace", Status: StatusSucceeded,
		Logs: Logs{Stdout: mustDigest("r"), Stderr: mustDigest("r")}, JobDigest: mustDigest("job report")})
	return a, b
}

func TestDiffGolden(t *testing.T) {
	a, b := changedRecord(t)
	d := Diff(a, b)
	if d.Identical {
		t.Fatal("Identical for records that differ")
	}
	// The ids are the records' own.
	rawA, _ := Encode(a)
	if d.A != IDOf(rawA) {
		t.Errorf("A = %s, want the id of a", d.A)
	}
	var text bytes.Buffer
	if err := d.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	js, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "diff.golden.txt", text.Bytes())
	checkGolden(t, "diff.golden.json", append(js, '\n'))

	// The JSON decodes back into a RecordDiff.
	var back RecordDiff
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if back.A != d.A || len(back.Steps) != len(d.Steps) || back.Steps[2].Closure == nil {
		t.Errorf("JSON round trip lost fields: %+v", back)
	}
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./record -run TestDiffGolden -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run go test ./record -run TestDiffGolden -update if intended)\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

func TestDiffSections(t *testing.T) {
	a, b := changedRecord(t)
	d := Diff(a, b)
	fields := func(list []Change) string {
		var s []string
		for _, c := range list {
			s = append(s, c.Field)
		}
		return strings.Join(s, ",")
	}
	if got := fields(d.Run); got != "toolVersion,status" {
		t.Errorf("run changes %s", got)
	}
	if d.Workflow == nil || fields(d.Workflow.Changes) != "fileDigest,canonicalHash" {
		t.Errorf("workflow %+v", d.Workflow)
	}
	if p := d.Policy; p == nil || fields(p.Changes) != "allowed" || len(p.DenyAdded) != 1 ||
		strings.Join(p.WarnAdded, ",") != "w3" || strings.Join(p.WarnRemoved, ",") != "w2" {
		t.Errorf("policy %+v", d.Policy)
	}
	var inputs []string
	for _, in := range d.Inputs {
		inputs = append(inputs, in.Name+" "+in.Change)
	}
	if got := strings.Join(inputs, ","); got != "code removed,data changed,extra added" {
		t.Errorf("inputs %s", got)
	}
	if got := fields(d.Host); got != "kernel,nix" {
		t.Errorf("host %s", got)
	}
	var steps []string
	for _, s := range d.Steps {
		steps = append(steps, s.Name+" "+s.Change)
	}
	if got := strings.Join(steps, ","); got != `eval <&> "quoted" removed,report added,train changed` {
		t.Fatalf("steps %s", got)
	}
	tr := d.Steps[2]
	if got := fields(tr.Fields); got != "accel,status,exitCode,inputs.code,logs.stdout" {
		t.Errorf("train fields %s", got)
	}
	c := tr.Closure
	if c == nil || len(c.Added) != 1 || c.Added[0].Path != "/nix/store/c-python" || len(c.Removed) != 1 ||
		c.Removed[0].Path != "/nix/store/b-busybox" || len(c.Changed) != 1 || c.Changed[0].Path != "/nix/store/a-env" {
		t.Errorf("closure %+v", c)
	}
	var outs []string
	for _, o := range tr.Outputs {
		outs = append(outs, o.Path+" "+o.Change)
	}
	if got := strings.Join(outs, ","); got != "out/a changed,out/b removed,out/c added" {
		t.Errorf("outputs %s", got)
	}
	var measured []string
	for _, m := range tr.Measured {
		measured = append(measured, m.Field)
	}
	if got := strings.Join(measured, ","); got != "durationMs,usage.cpuTimeNs,usage.peakMemoryBytes,usage.pidsPeak" {
		t.Errorf("measured %s", got)
	}
	if tr.Measured[0].Delta != 120 || tr.Measured[0].Unit != "ms" {
		t.Errorf("duration %+v", tr.Measured[0])
	}
}

// Runs that differ only in what they measured are identical; the
// measurements are still listed.
func TestDiffMeasurementsOnly(t *testing.T) {
	a := copyRecord(t, sampleRecord(false))
	b := copyRecord(t, a)
	if d := Diff(a, b); !d.Identical || d.Steps != nil || d.Measured != nil || d.A != d.B {
		t.Fatalf("a record against itself: %+v", d)
	}
	// Where a run came from is not what it did.
	b.Parent = &ID{1}
	if d := Diff(a, b); !d.Identical || d.ParentB == nil || *d.ParentB != (ID{1}) {
		t.Fatalf("a rerun: %+v", d)
	}
	b.Started = b.Started.Add(time.Hour)
	b.Finished = b.Finished.Add(time.Hour + time.Second)
	st := stepNamed(t, b, "train")
	st.Usage.CPUTimeNs += 1e6
	d := Diff(a, b)
	if !d.Identical || len(d.Steps) != 1 || d.Steps[0].Change != Unchanged || len(d.Measured) != 1 || d.Measured[0].Delta != 1000 {
		t.Fatalf("measurements only: %+v", d)
	}
	var text bytes.Buffer
	d.WriteText(&text)
	for _, want := range []string{"identical (only measurements differ)", "step train: unchanged", "cpu 12 µs -> 1.0 ms (+1.0 ms)", "run measured: duration 2000 ms -> 3000 ms (+1000 ms)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
}

func TestDiffYAML(t *testing.T) {
	parse := func(s string) any {
		var v any
		if err := yaml.Unmarshal([]byte(s), &v); err != nil {
			t.Fatal(err)
		}
		return normalizeYAML(v)
	}
	a := parse(`
name: wf
steps:
  - name: train
    run: python train.py
    resources: {memory: 512M, vcpu: 2}
    outputs: [out/model, out/log]
  - name: eval
    run: python eval.py
`)
	b := parse(`
name: wf
description: new
steps:
  - name: eval
    run: python eval.py
  - name: train
    run: python train.py --fast
    resources: {memory: 1G, vcpu: 2}
    outputs: [out/model]
  - name: report
    run: echo
`)
	var got []string
	for _, f := range DiffYAML(a, b) {
		got = append(got, f.Path+" "+f.Change+" "+yamlValue(f.A)+" "+yamlValue(f.B))
	}
	want := []string{
		"description added none new",
		`steps.report added none {"name":"report","run":"echo"}`,
		"steps.train.outputs[1] removed out/log none",
		"steps.train.resources.memory changed 512M 1G",
		"steps.train.run changed python train.py python train.py --fast",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if d := DiffYAML(a, a); d != nil {
		t.Errorf("a document against itself: %+v", d)
	}
}

// DiffRecords reads the workflow files and output NARs the records name.
func TestDiffRecordsStore(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	put := func(body string) Digest {
		d, _, err := s.PutBlob(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	a := copyRecord(t, sampleRecord(false))
	a.Workflow.FileDigest = put("name: wf\nsteps:\n  - name: train\n    run: make\n    resources: {memory: 512M}\n")
	st := stepNamed(t, a, "train")
	st.Outputs = []Output{{Path: "out/a", NarHash: putTree(t, s, tree{"m.bin": "weights v1", "log": "same"})}}
	b := copyRecord(t, a)
	b.Workflow.FileDigest = put("name: wf\nsteps:\n  - name: train\n    run: make\n    resources: {memory: 1G}\n")
	stepNamed(t, b, "train").Outputs[0].NarHash = putTree(t, s, tree{"m.bin": "weights v2!", "log": "same"})
	ida, err := s.Put(a)
	if err != nil {
		t.Fatal(err)
	}
	idb, err := s.Put(b)
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.DiffRecords(ida, idb)
	if err != nil {
		t.Fatal(err)
	}
	if d.A != ida || d.B != idb || d.Identical || len(d.Notes) != 0 {
		t.Fatalf("%+v", d)
	}
	if w := d.Workflow; w == nil || len(w.Fields) != 1 || w.Fields[0].Path != "steps.train.resources.memory" {
		t.Errorf("workflow fields %+v", d.Workflow)
	}
	o := d.Steps[0].Outputs
	if len(o) != 1 || o[0].Files == nil || len(o[0].Files.Files) != 1 || o[0].Files.Files[0].Path != "m.bin" || o[0].Files.Files[0].Change != ChangeModified {
		t.Fatalf("outputs %+v", o)
	}
	var text bytes.Buffer
	d.WriteText(&text)
	for _, want := range []string{"~ steps.train.resources.memory: 512M -> 1G", "output out/a: changed", "~ m.bin: contents 10 B -> 11 B (+1 B)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}

	// A blob this store lacks is a note; one that fails its hash, an error.
	if err := os.Remove(s.BlobPath(b.Workflow.FileDigest)); err != nil {
		t.Fatal(err)
	}
	out := s.BlobPath(stepNamed(t, b, "train").Outputs[0].NarHash.Blob())
	if err := os.Remove(out); err != nil {
		t.Fatal(err)
	}
	d, err = s.DiffRecords(ida, idb)
	if err != nil || len(d.Notes) != 2 || d.Workflow.Fields != nil || d.Steps[0].Outputs[0].Files != nil {
		t.Fatalf("missing blobs: %v, %+v", err, d)
	}
	if err := os.WriteFile(s.BlobPath(b.Workflow.FileDigest), []byte("name: forged\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DiffRecords(ida, idb); !errors.Is(err, ErrHashMismatch) {
		t.Fatalf("forged workflow blob: %v", err)
	}
}
