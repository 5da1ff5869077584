package sandboxes

import (
	"context"
	"go.opentelemetry.io/otel/trace/noop"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestExecSpan: a command run in a real sandbox is a "sandbox exec" span
// under the request's, naming the sandbox, the exec and its exit code.
func TestExecSpan(t *testing.T) {
	m, _ := newManager(t, Options{})
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	info, err := m.Create(context.Background(), Spec{Resources: map[string]any{"timeout": "1m"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, req := otel.Tracer("test").Start(context.Background(), "request")
	x, err := m.Exec(ctx, info.ID, ExecRequest{Shell: "exit 3"}, nil)
	req.End()
	if err != nil || x.Exit == nil || x.Exit.ExitCode != 3 {
		t.Fatalf("exec: %+v %v", x, err)
	}
	// The span ends when the command's record entry is written, just after.
	var got sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(30 * time.Second); got == nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, s := range spans.Ended() {
			if s.Name() == "sandbox exec" {
				got = s
			}
		}
	}
	if got == nil {
		t.Fatal("no sandbox exec span")
	}
	if got.Parent().SpanID() != req.SpanContext().SpanID() {
		t.Errorf("the exec span is not a child of the request's")
	}
	a := map[string]string{}
	for _, kv := range got.Attributes() {
		a[string(kv.Key)] = kv.Value.Emit()
	}
	want := map[string]string{"agentsandbox.sandbox.id": info.ID, "agentsandbox.exec.id": x.ID, "process.exit.code": "3", "process.executable.name": "sh"}
	for k, v := range want {
		if a[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, a[k], v, a)
		}
	}
	// The command sees its span as TRACEPARENT, so its own spans join.
	var out strings.Builder
	ctx2, req2 := otel.Tracer("test").Start(context.Background(), "request 2")
	_, err = m.Exec(ctx2, info.ID, ExecRequest{Shell: "echo $TRACEPARENT"}, func(ev ExecEvent) error {
		out.WriteString(ev.Text)
		return nil
	})
	req2.End()
	if want := "00-" + req2.SpanContext().TraceID().String() + "-"; err != nil || !strings.HasPrefix(out.String(), want) {
		t.Errorf("TRACEPARENT %q (%v), want it in the request's trace (%s...)", out.String(), err, want)
	}
	// With tracing off the command gets none.
	otel.SetTracerProvider(noop.NewTracerProvider())
	if got, _, _ := collect(t, m, info.ID, ExecRequest{Shell: "echo \"[$TRACEPARENT]\""}); got != "[]\n" {
		t.Errorf("TRACEPARENT with tracing off: %q", got)
	}
}
