package sandboxes

import (
	"context"
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
}
