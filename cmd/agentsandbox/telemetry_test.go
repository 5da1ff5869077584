package main

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentsandbox/agentsandbox/internal/otlptest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/record"
)

// clearOTEL unsets every variable that could turn tracing on or shape it,
// whatever the environment running the tests holds.
func clearOTEL(t *testing.T) {
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "OTEL_") || k == "TRACEPARENT" || k == "TRACESTATE" {
			t.Setenv(k, "")
		}
	}
}

// tracedWorkflow writes a workflow of one checksummed input and one step
// that prints the TRACEPARENT it was given.
func tracedWorkflow(t *testing.T, dir string) string {
	words := []byte("alpha beta\n")
	if err := os.WriteFile(filepath.Join(dir, "words.txt"), words, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(words)
	p := filepath.Join(dir, "traced.yaml")
	yaml := "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: traced\ninputs:\n  words:\n    source: words.txt\n    sha256: " +
		hex.EncodeToString(sum[:]) + "\nsteps:\n  - name: show\n    inputs: [words]\n    run: echo \"traceparent=$TRACEPARENT.\"\n    resources: {timeout: 30s}\n"
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// sdkGoroutines counts goroutines running OpenTelemetry SDK code.
func sdkGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "go.opentelemetry.io/otel/sdk/") || strings.Contains(g, "agentsandbox/telemetry.") {
			n++
		}
	}
	return n
}

// TestTelemetryOffStartsNothing: without OTEL_* variables (a TRACEPARENT
// alone does not count) no provider is installed and no goroutine runs;
// with an endpoint both happen, so the check can tell.
func TestTelemetryOffStartsNothing(t *testing.T) {
	clearOTEL(t)
	t.Setenv("TRACEPARENT", "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01")
	var stderr strings.Builder
	stop := startTelemetry(&stderr)
	if _, sdk := otel.GetTracerProvider().(*sdktrace.TracerProvider); sdk || sdkGoroutines() != 0 {
		t.Errorf("tracing off: provider %T, %d SDK goroutines", otel.GetTracerProvider(), sdkGoroutines())
	}
	stop()
	if stderr.Len() != 0 {
		t.Errorf("stderr %q", stderr.String())
	}

	rcv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", rcv.URL)
	stop = startTelemetry(&stderr)
	// The batch processor's goroutine may not show at once.
	n := 0
	for deadline := time.Now().Add(5 * time.Second); n == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		n = sdkGoroutines()
	}
	if _, sdk := otel.GetTracerProvider().(*sdktrace.TracerProvider); !sdk || n == 0 {
		t.Errorf("tracing on: provider %T, %d SDK goroutines", otel.GetTracerProvider(), n)
	}
	stop()
	if _, sdk := otel.GetTracerProvider().(*sdktrace.TracerProvider); sdk {
		t.Errorf("the stopped provider is still the global one")
	}
}

// TestTelemetryGRPCRefused: one warning line, and the command runs.
func TestTelemetryGRPCRefused(t *testing.T) {
	clearOTEL(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	code, out, stderr := execute(t, "version")
	if code != ExitOK || out == "" {
		t.Fatalf("version: exit %d %q", code, out)
	}
	if strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "warning: tracing off: OTEL_EXPORTER_OTLP_PROTOCOL=grpc: only OTLP over HTTP") {
		t.Errorf("stderr %q, want one warning line", stderr)
	}
}

// TestApplyTraces runs a real apply with tracing on, joined to a
// TRACEPARENT, against an in-process OTLP receiver in each encoding.
func TestApplyTraces(t *testing.T) {
	for _, protocol := range []string{"http/protobuf", "http/json"} {
		t.Run(protocol, func(t *testing.T) { testApplyTraces(t, protocol) })
	}
}

func testApplyTraces(t *testing.T, protocol string) {
	testtier.Root(t)
	clearOTEL(t)
	rcv := otlptest.Start(t)
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20s3cret")
	t.Setenv("OTEL_SERVICE_NAME", "ci-agentsandbox")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
	t.Setenv("TRACEPARENT", "00-"+callerTrace+"-"+callerSpan+"-01")
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	code, out, stderr := execute(t, "apply", "--isolation", "namespace", "--state-dir", state, tracedWorkflow(t, dir))
	if code != ExitOK {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, stderr)
	}
	if strings.Contains(stderr, "warning: traces") {
		t.Errorf("export warning: %s", stderr)
	}
	id := lastLine(out)

	spans := rcv.Spans()
	byName := map[string]otlptest.Span{}
	for _, s := range spans {
		if _, dup := byName[s.Name]; dup {
			t.Errorf("two spans named %q", s.Name)
		}
		byName[s.Name] = s
	}
	root, ok := byName["apply traced"]
	if !ok {
		t.Fatalf("no span \"apply traced\"; got %+v", spans)
	}
	if root.TraceID != callerTrace || root.ParentSpanID != callerSpan || root.Kind != 2 {
		t.Errorf("apply span: trace %s parent %s kind %d; want trace %s, parent %s (TRACEPARENT), kind server",
			root.TraceID, root.ParentSpanID, root.Kind, callerTrace, callerSpan)
	}
	want := map[string]string{"cicd.pipeline.name": "traced", "cicd.pipeline.result": "success", "agentsandbox.record.id": id}
	for k, v := range want {
		if root.Attrs[k] != v {
			t.Errorf("apply span %s = %q, want %q", k, root.Attrs[k], v)
		}
	}
	if len(root.Attrs["cicd.pipeline.run.id"]) != 32 { // 128 random bits in hex
		t.Errorf("apply span cicd.pipeline.run.id = %q", root.Attrs["cicd.pipeline.run.id"])
	}
	if r := root.Resource; r["service.name"] != "ci-agentsandbox" || r["deployment.environment"] != "test" || r["service.version"] == "" {
		t.Errorf("resource %v", r)
	}
	for _, name := range []string{"parse", "admit", "fetch words", "step show", "record"} {
		s, ok := byName[name]
		switch {
		case !ok:
			t.Errorf("no span %q", name)
		case s.TraceID != callerTrace || s.ParentSpanID != root.SpanID:
			t.Errorf("span %q: trace %s parent %s, want a child of the apply span %s", name, s.TraceID, s.ParentSpanID, root.SpanID)
		case s.StatusCode == 2:
			t.Errorf("span %q: error %q", name, s.StatusMessage)
		}
	}
	step := byName["step show"]
	for k, v := range map[string]string{"cicd.pipeline.task.name": "show", "cicd.pipeline.task.run.result": "success",
		"process.exit.code": "0", "agentsandbox.isolation": "namespace", "agentsandbox.step.status": "succeeded"} {
		if step.Attrs[k] != v {
			t.Errorf("step span %s = %q, want %q (all: %v)", k, step.Attrs[k], v, step.Attrs)
		}
	}
	if byName["admit"].Attrs["agentsandbox.policy.allowed"] != "true" || byName["admit"].Attrs["agentsandbox.decision.id"] == "" {
		t.Errorf("admit span %v", byName["admit"].Attrs)
	}
	if byName["record"].Attrs["agentsandbox.record.id"] != id {
		t.Errorf("record span %v, want record id %s", byName["record"].Attrs, id)
	}
	for _, req := range rcv.Requests() {
		if req.Header.Get("Authorization") != "Bearer s3cret" {
			t.Errorf("export request without OTEL_EXPORTER_OTLP_HEADERS: %v", req.Header)
		}
	}

	// The job saw TRACEPARENT for its step's span.
	wantTP := "traceparent=00-" + callerTrace + "-" + step.SpanID + "-01."
	if !strings.Contains(stderr, "[show] "+wantTP) {
		t.Errorf("the job's output lacks %q:\n%s", wantTP, stderr)
	}
	// The record names the trace.
	store, err := record.OpenStore(state)
	if err != nil {
		t.Fatal(err)
	}
	rid, err := record.ParseID(id)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := store.Get(rid)
	if err != nil {
		t.Fatal(err)
	}
	if rec.TraceID != callerTrace {
		t.Errorf("record traceId %q, want %s", rec.TraceID, callerTrace)
	}
}

// TestApplyUntracedExportsNothing: with no OTEL_* variable set, a real
// apply sends nothing (a receiver is listening) and its job and record
// name no trace.
func TestApplyUntracedExportsNothing(t *testing.T) {
	testtier.Root(t)
	clearOTEL(t)
	rcv := otlptest.Start(t)
	dir := t.TempDir()
	code, out, stderr := execute(t, "apply", "--isolation", "namespace", "--state-dir", filepath.Join(dir, "state"), tracedWorkflow(t, dir))
	if code != ExitOK {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, stderr)
	}
	if n := len(rcv.Requests()); n != 0 {
		t.Errorf("%d export requests with tracing off", n)
	}
	if !strings.Contains(stderr, "[show] traceparent=.") {
		t.Errorf("the job was given a TRACEPARENT with tracing off:\n%s", stderr)
	}
	store, _ := record.OpenStore(filepath.Join(dir, "state"))
	rid, _ := record.ParseID(lastLine(out))
	if rec, err := store.Get(rid); err != nil || rec.TraceID != "" {
		t.Errorf("record: traceId %q, %v", rec.TraceID, err)
	}
	if n := sdkGoroutines(); n != 0 {
		t.Errorf("%d SDK goroutines after an untraced apply", n)
	}
}

// TestApplyDeadCollector: a collector that never answers, or nothing
// listening, neither fails apply nor holds it past the shutdown bound,
// though the export timeout is ten minutes; stderr says so in one line.
func TestApplyDeadCollector(t *testing.T) {
	testtier.Root(t)
	hang := make(chan struct{})
	silent := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hang }))
	defer silent.Close()
	defer close(hang)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	for name, endpoint := range map[string]string{"never answers": silent.URL, "nothing listens": closed} {
		t.Run(name, func(t *testing.T) {
			clearOTEL(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "600000")
			dir := t.TempDir()
			start := time.Now()
			code, out, stderr := execute(t, "apply", "--isolation", "namespace", "--state-dir", filepath.Join(dir, "state"), tracedWorkflow(t, dir))
			took := time.Since(start)
			if code != ExitOK || len(lastLine(out)) != 52 {
				t.Fatalf("apply: exit %d\n%s\n%s", code, out, stderr)
			}
			// The run itself takes about a second; without the bound the
			// export would hold apply for ten minutes.
			if took > 2*time.Minute {
				t.Errorf("apply took %v with a dead collector", took)
			}
			if n := strings.Count(stderr, "warning: traces may be incomplete"); n != 1 || !strings.Contains(stderr, endpoint) {
				t.Errorf("want one warning line naming %s, got %d:\n%s", endpoint, n, stderr)
			}
		})
	}
}

// TestRerunTraces: rerun, which starts no span of its own before the run,
// still gives the run one trace: an apply span over every phase.
func TestRerunTraces(t *testing.T) {
	testtier.Root(t)
	clearOTEL(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	code, out, stderr := execute(t, "apply", "--isolation", "namespace", "--state-dir", state, tracedWorkflow(t, dir))
	if code != ExitOK {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, stderr)
	}
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", rcv.URL)
	code, out, stderr = execute(t, "rerun", "--isolation", "namespace", "--state-dir", state, lastLine(out))
	if code != ExitOK {
		t.Fatalf("rerun: exit %d\n%s\n%s", code, out, stderr)
	}
	var root otlptest.Span
	for _, s := range rcv.Spans() {
		if s.Name == "apply traced" {
			root = s
		}
	}
	if root.SpanID == "" || root.ParentSpanID != "" {
		t.Fatalf("no root apply span: %+v", rcv.Spans())
	}
	for _, s := range rcv.Spans() {
		if s.SpanID != root.SpanID && (s.TraceID != root.TraceID || s.ParentSpanID != root.SpanID) {
			t.Errorf("span %q (trace %s, parent %s) is not under the rerun's apply span", s.Name, s.TraceID, s.ParentSpanID)
		}
	}
	if len(rcv.Spans()) < 4 {
		t.Errorf("only %d spans", len(rcv.Spans()))
	}
}
