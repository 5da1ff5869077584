package policy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/decisionlog*.golden from the encoder's output")

// fixedEvents are an admission (logged input), an admission whose input
// is over the limit (erased) and a denied action, all from fixed values.
func fixedEvents(t *testing.T) []DecisionEvent {
	t.Helper()
	bundle := Digest(sha256.Sum256([]byte("bundle")))
	at := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.FixedZone("CET", 3600))
	o := EventOptions{ID: "run-0123", Version: "v0.0.0-test", RequestedBy: "uid:1000", Time: at}

	in := []byte(`{"workflow": {"name": "demo"}, "host": {"kvm": true}}`)
	d := &Decision{BundleDigest: bundle, InputDigest: sha256.Sum256(in), Warn: []string{"step build: no timeout"}, EvalTime: 1500 * time.Microsecond}
	d.ID = decisionID(d.BundleDigest, d.InputDigest)
	adm, err := AdmissionEvent(d, in, o)
	if err != nil {
		t.Fatal(err)
	}

	big := []byte(`{"workflow":{"name":"` + strings.Repeat("x", 100) + `"}}`)
	d2 := &Decision{BundleDigest: bundle, InputDigest: sha256.Sum256(big), Deny: []string{"step x: vm needs KVM"}}
	d2.ID = decisionID(d2.BundleDigest, d2.InputDigest)
	o2 := o
	o2.MaxInput = 50
	erased, err := AdmissionEvent(d2, big, o2)
	if err != nil {
		t.Fatal(err)
	}

	a := Action{Action: ActionFileRead, Sandbox: ActionSandbox{ID: "sb1", Isolation: "namespace"}, Path: "secrets/key"}
	ain, _ := json.Marshal(a)
	ad := &ActionDecision{BundleDigest: bundle, InputDigest: sha256.Sum256(ain), Action: a.Action, Deny: []string{"secrets/key: agents may read only under data/"}}
	ad.ID = decisionID(ad.BundleDigest, ad.InputDigest)
	o3 := o
	o3.RequestedBy = "sandbox:sb1"
	act, err := ActionEvent(ad, a, 42*time.Microsecond, o3)
	if err != nil {
		t.Fatal(err)
	}
	return []DecisionEvent{adm, erased, act}
}

func TestDecisionLogGolden(t *testing.T) {
	var b bytes.Buffer
	if err := EncodeDecisionLog(&b, fixedEvents(t)); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "decisionlog.golden.jsonl")
	if *updateGolden {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("decision log differs from %s (rerun with -update if intended):\n got: %s\nwant: %s", golden, b.Bytes(), want)
	}

	// The golden lines decode strictly, and encode back to the same bytes.
	evs, err := DecodeDecisionLog(bytes.NewReader(want))
	if err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := EncodeDecisionLog(&again, evs); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), want) {
		t.Errorf("decode and encode changed the log:\n got: %s\nwant: %s", again.Bytes(), want)
	}
}

func TestDecisionEventFields(t *testing.T) {
	evs := fixedEvents(t)
	adm, erased, act := evs[0], evs[1], evs[2]
	if adm.Timestamp.Location() != time.UTC || adm.Labels["type"] != LogType || adm.Labels["id"] != "run-0123" {
		t.Errorf("admission labels and time: %v %v", adm.Labels, adm.Timestamp)
	}
	if adm.Path != AdmissionPath || act.Path != ActionPath {
		t.Errorf("paths %q %q", adm.Path, act.Path)
	}
	if string(adm.Input) != `{"workflow":{"name":"demo"},"host":{"kvm":true}}` || adm.Erased != nil {
		t.Errorf("admission input %s erased %v", adm.Input, adm.Erased)
	}
	if erased.Input != nil || len(erased.Erased) != 1 || erased.Erased[0] != "/input" || erased.Custom["input_digest"] == "" {
		t.Errorf("over-limit input: %s %v %v", erased.Input, erased.Erased, erased.Custom)
	}
	if adm.Metrics["timer_rego_query_eval_ns"] != int64(1500000) {
		t.Errorf("metrics %v", adm.Metrics)
	}
	var res map[string]any
	if err := json.Unmarshal(act.Result, &res); err != nil || res["allowed"] != false {
		t.Errorf("action result %s: %v", act.Result, err)
	}

	// An input that is not the decision's is refused.
	d := &Decision{InputDigest: sha256.Sum256([]byte("{}"))}
	if _, err := AdmissionEvent(d, []byte(`{"x":1}`), EventOptions{}); err == nil || !strings.Contains(err.Error(), "does not hash") {
		t.Errorf("mismatched input: %v", err)
	}
	// MaxInput < 0 never logs the input.
	no, err := AdmissionEvent(&Decision{InputDigest: sha256.Sum256([]byte("{}"))}, []byte("{}"), EventOptions{MaxInput: -1, Time: time.Unix(1, 0)})
	if err != nil || no.Input != nil || len(no.Erased) != 1 {
		t.Errorf("MaxInput -1: %+v %v", no, err)
	}
}

func TestDecisionLogFromEval(t *testing.T) {
	e := load(t, Options{})
	w := okWorkflow()
	d := eval(t, e, w, vmHost)
	in, err := InputDocument(w, vmHost)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := AdmissionEvent(d, in, EventOptions{ID: "x", Time: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if ev.DecisionID != d.ID.String() || ev.BundleRevision() != e.BundleDigest().String() {
		t.Errorf("event %s %s, decision %s bundle %s", ev.DecisionID, ev.BundleRevision(), d.ID, e.BundleDigest())
	}
	a := Action{Action: ActionExec, Command: []string{"make"}}
	ad, err := e.EvalAction(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	aev, err := ActionEvent(ad, a, time.Millisecond, EventOptions{Time: ad.Time})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := EncodeDecisionLog(&b, []DecisionEvent{ev, aev}); err != nil {
		t.Fatal(err)
	}
	got, err := DecodeDecisionLog(&b)
	if err != nil || len(got) != 2 || got[1].DecisionID != ad.ID.String() {
		t.Fatalf("decode: %v %+v", err, got)
	}
}

func TestDecodeDecisionLogIsStrict(t *testing.T) {
	good := `{"labels":{"id":"x"},"decision_id":"sha256:` + strings.Repeat("0", 64) + `","timestamp":"2026-11-30T12:00:00Z"}`
	if _, err := DecodeDecisionLog(strings.NewReader(good + "\n")); err != nil {
		t.Fatalf("good line: %v", err)
	}
	for name, in := range map[string]string{
		"unknown field": strings.Replace(good, `"labels"`, `"labelz"`, 1),
		"trailing data": good + ` {}`,
		"bad id":        strings.Replace(good, "sha256:", "md5:", 1),
		"no timestamp":  strings.Replace(good, `,"timestamp":"2026-11-30T12:00:00Z"`, "", 1),
		"empty line":    good + "\n\n" + good,
		"not json":      "decision",
	} {
		if _, err := DecodeDecisionLog(strings.NewReader(in)); err == nil {
			t.Errorf("%s: decoded %q", name, in)
		}
	}
}

// FuzzDecodeDecisionLog: any bytes decode or fail; what decodes encodes
// and decodes again to the same bytes.
func FuzzDecodeDecisionLog(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("testdata", "decisionlog.golden.jsonl")); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"labels":{},"decision_id":"sha256:` + strings.Repeat("0", 64) + `","timestamp":"2026-01-01T00:00:00Z","input":[1,2]}`))
	f.Add([]byte("{}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, err := DecodeDecisionLog(bytes.NewReader(b))
		if err != nil {
			return
		}
		var once bytes.Buffer
		if err := EncodeDecisionLog(&once, evs); err != nil {
			t.Fatalf("encode what decoded: %v", err)
		}
		again, err := DecodeDecisionLog(bytes.NewReader(once.Bytes()))
		if err != nil {
			t.Fatalf("decode what was encoded: %v\n%s", err, once.Bytes())
		}
		var twice bytes.Buffer
		if err := EncodeDecisionLog(&twice, again); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(once.Bytes(), twice.Bytes()) {
			t.Fatalf("not stable:\n%s\n%s", once.Bytes(), twice.Bytes())
		}
	})
}

// BenchmarkAdmissionEvent100Steps is what the decision log adds to an
// apply of a 100-step workflow: the input document again, the event and
// its line (BenchmarkEvalDefault100Steps is the evaluation itself).
func BenchmarkAdmissionEvent100Steps(b *testing.B) {
	e := load(b, Options{})
	w := generated(100)
	d := eval(b, e, w, vmHost)
	o := EventOptions{ID: "run", Version: "bench", Time: time.Now(), MaxInput: 1 << 20}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		in, err := InputDocument(w, vmHost)
		if err != nil {
			b.Fatal(err)
		}
		ev, err := AdmissionEvent(d, in, o)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := AppendEvent(nil, ev); err != nil {
			b.Fatal(err)
		}
	}
}
