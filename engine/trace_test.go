package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/fakebackend"
)

const tracedYAML = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: traced
inputs:
  words:
    source: words.txt
    sha256: %SHA%
steps:
  - name: echo
    inputs: [words]
    run: printf '%s' "$TRACEPARENT" > tp.txt; printf '%s' "${TRACESTATE-unset}" > ts.txt
    outputs: [tp.txt, ts.txt]
    resources: {timeout: 30s}
  - name: fails
    run: exit 3
    resources: {timeout: 30s}
`

// recordSpans installs an in-memory tracer provider as the global one
// for the test.
func recordSpans(t *testing.T) *tracetest.SpanRecorder {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev); tp.Shutdown(context.Background()) })
	return rec
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value.Emit()
	}
	return m
}

// TestRunSpans: every phase of a run is a child of the caller's span,
// with its attributes; the job sees TRACEPARENT for its step's span; the
// record names the trace.
func TestRunSpans(t *testing.T) {
	spans := recordSpans(t)
	f := newFixture(t, tracedYAML)
	ctx, root := otel.Tracer("test").Start(context.Background(), "apply")
	res, err := Run(ctx, f.w, f.options(t, fakebackend.New(), nil))
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans.Ended() {
		byName[s.Name()] = s
	}
	for _, name := range []string{"admit", "fetch words", "step echo", "step fails", "record"} {
		s, ok := byName[name]
		if !ok {
			t.Fatalf("no span %q; have %v", name, byName)
		}
		if s.Parent().SpanID() != root.SpanContext().SpanID() || s.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("span %q is not a child of the caller's span", name)
		}
		if s.InstrumentationScope().Name != TracerName {
			t.Errorf("span %q scope %q", name, s.InstrumentationScope().Name)
		}
	}
	if _, ok := byName["realise"]; ok {
		t.Errorf("a realise span without Nix steps")
	}
	rootAttrs := attrs(spans.Ended()[len(spans.Ended())-1])
	if rootAttrs[attrRunID] == "" {
		t.Errorf("the caller's span has no %s: %v", attrRunID, rootAttrs)
	}
	a := attrs(byName["admit"])
	if a[attrDecisionID] != res.Record.Policy.DecisionID || a[attrAllowed] != "true" {
		t.Errorf("admit attributes %v, want decision %s allowed", a, res.Record.Policy.DecisionID)
	}
	if got := attrs(byName["fetch words"])[attrInputDigest]; got != res.Record.Inputs[0].Digest.String() {
		t.Errorf("fetch digest %q, want %s", got, res.Record.Inputs[0].Digest)
	}
	echo, fails := byName["step echo"], byName["step fails"]
	if a := attrs(echo); a[attrTaskName] != "echo" || a[attrTaskResult] != "success" || a[attrExitCode] != "0" || a[attrIsolation] != "namespace" || a[attrStatus] != "succeeded" {
		t.Errorf("step echo attributes %v", a)
	}
	if echo.Status().Code != codes.Unset {
		t.Errorf("step echo status %v", echo.Status())
	}
	if a := attrs(fails); a[attrTaskResult] != "failure" || a[attrExitCode] != "3" || a[attrStatus] != "failed" {
		t.Errorf("step fails attributes %v", a)
	}
	if fails.Status().Code != codes.Error || !strings.Contains(fails.Status().Description, "exit 3") {
		t.Errorf("step fails status %v", fails.Status())
	}
	if got := attrs(byName["record"])[attrRecordID]; got != res.ID.String() {
		t.Errorf("record span id %q, want %s", got, res.ID)
	}
	stored, err := f.store.Get(res.ID) // decoded strictly
	if err != nil {
		t.Fatal(err)
	}
	if stored.TraceID != root.SpanContext().TraceID().String() {
		t.Errorf("record traceId %q, want %s", stored.TraceID, root.SpanContext().TraceID())
	}

	// The job saw its step span's context, and no TRACESTATE (empty).
	out := filepath.Join(f.dir, "export")
	exportTo(t, f.store, res.ID, out)
	tp, _ := os.ReadFile(filepath.Join(out, "echo", "tp.txt"))
	want := "00-" + echo.SpanContext().TraceID().String() + "-" + echo.SpanContext().SpanID().String() + "-01"
	if string(tp) != want {
		t.Errorf("the job's TRACEPARENT %q, want %q", tp, want)
	}
	if ts, _ := os.ReadFile(filepath.Join(out, "echo", "ts.txt")); string(ts) != "unset" {
		t.Errorf("the job's TRACESTATE %q, want it unset", ts)
	}
}

// TestRunWithoutTracing: with the API's no-op provider the job gets no
// TRACEPARENT and the record no traceId.
func TestRunWithoutTracing(t *testing.T) {
	f := newFixture(t, tracedYAML)
	res, err := Run(context.Background(), f.w, f.options(t, fakebackend.New(), nil))
	if err != nil {
		t.Fatal(err)
	}
	if res.Record.TraceID != "" {
		t.Errorf("record traceId %q without tracing", res.Record.TraceID)
	}
	out := filepath.Join(f.dir, "export")
	exportTo(t, f.store, res.ID, out)
	if tp, err := os.ReadFile(filepath.Join(out, "echo", "tp.txt")); err != nil || len(tp) != 0 {
		t.Errorf("the job's TRACEPARENT %q (%v), want empty", tp, err)
	}
}

// TestAddTraceEnv: the variables go in sorted, with the trace state; a
// step's own TRACEPARENT is kept; no span, no variables.
func TestAddTraceEnv(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("0123456789abcdef0123456789abcdef")
	sid, _ := trace.SpanIDFromHex("0123456789abcdef")
	ts, _ := trace.ParseTraceState("vendor=x")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)

	job := guest.Job{Env: []string{"HOME=/tmp", "PATH=/bin", "ZED=1"}}
	addTraceEnv(ctx, &job)
	want := []string{"HOME=/tmp", "PATH=/bin", "TRACEPARENT=00-0123456789abcdef0123456789abcdef-0123456789abcdef-01", "TRACESTATE=vendor=x", "ZED=1"}
	if strings.Join(job.Env, " ") != strings.Join(want, " ") {
		t.Errorf("env %q, want %q", job.Env, want)
	}

	own := guest.Job{Env: []string{"TRACEPARENT=mine"}}
	addTraceEnv(ctx, &own)
	if strings.Join(own.Env, " ") != "TRACEPARENT=mine TRACESTATE=vendor=x" {
		t.Errorf("env %q: the step's own TRACEPARENT was not kept", own.Env)
	}

	none := guest.Job{Env: []string{"A=1"}}
	addTraceEnv(context.Background(), &none)
	if len(none.Env) != 1 {
		t.Errorf("env %q without a span", none.Env)
	}
}

// TestRunUnsampled: a trace the sampler drops is not named in the record,
// and the job's TRACEPARENT says it is not sampled (flags 00).
func TestRunUnsampled(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	f := newFixture(t, tracedYAML)
	ctx, root := otel.Tracer("test").Start(context.Background(), "apply")
	res, err := Run(ctx, f.w, f.options(t, fakebackend.New(), nil))
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	if res.Record.TraceID != "" {
		t.Errorf("record traceId %q of an unsampled trace", res.Record.TraceID)
	}
	out := filepath.Join(f.dir, "export")
	exportTo(t, f.store, res.ID, out)
	tpv, _ := os.ReadFile(filepath.Join(out, "echo", "tp.txt"))
	if !strings.HasPrefix(string(tpv), "00-"+root.SpanContext().TraceID().String()+"-") || !strings.HasSuffix(string(tpv), "-00") {
		t.Errorf("the job's TRACEPARENT %q, want the trace with flags 00", tpv)
	}
}
