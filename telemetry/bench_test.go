package telemetry

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// BenchmarkFromEnvOff is what tracing costs a command when no OTEL_*
// variable is set: reading the environment and deciding it is off.
func BenchmarkFromEnvOff(b *testing.B) {
	env := func(string) string { return "" }
	for b.Loop() {
		if _, on, err := FromEnv(env); on || err != nil {
			b.Fatal(on, err)
		}
	}
}

// spans100 are 100 ended spans with a step span's attributes.
func spans100(testing.TB) []sdktrace.ReadOnlySpan {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	ctx, root := tp.Tracer("bench").Start(context.Background(), "apply")
	for i := range 99 {
		_, s := tp.Tracer("bench").Start(ctx, fmt.Sprintf("step s%d", i))
		s.SetAttributes(attribute.String("cicd.pipeline.task.name", fmt.Sprintf("s%d", i)), attribute.String("agentsandbox.isolation", "namespace"),
			attribute.String("cicd.pipeline.task.run.result", "success"), attribute.Int("process.exit.code", 0))
		s.End()
	}
	root.End()
	return rec.Ended()
}

func BenchmarkEncode100Spans(b *testing.B) {
	spans := spans100(b)
	res := []attribute.KeyValue{attribute.String("service.name", "agentsandbox")}
	b.Run("protobuf", func(b *testing.B) {
		for b.Loop() {
			b.SetBytes(int64(len(encodeProtobuf(res, spans))))
		}
	})
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			out, err := encodeJSON(res, spans)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(out)))
		}
	})
}

// TestProtobufLarge: a request whose messages need two- and three-byte
// lengths (100 spans, over 16 KiB) decodes with the reference types.
func TestProtobufLarge(t *testing.T) {
	spans := spans100(t)
	body := encodeProtobuf([]attribute.KeyValue{attribute.String("service.name", "x")}, spans)
	if len(body) < 16<<10 {
		t.Fatalf("only %d bytes: the three-byte length is not exercised", len(body))
	}
	var td tracepb.TracesData
	if err := proto.Unmarshal(body, &td); err != nil {
		t.Fatal(err)
	}
	got := td.GetResourceSpans()[0].GetScopeSpans()[0].GetSpans()
	if len(got) != len(spans) {
		t.Fatalf("decoded %d spans, want %d", len(got), len(spans))
	}
	for i, s := range got {
		if s.GetName() != spans[i].Name() || len(s.GetAttributes()) != len(spans[i].Attributes()) {
			t.Errorf("span %d: %q with %d attributes, want %q with %d", i, s.GetName(), len(s.GetAttributes()), spans[i].Name(), len(spans[i].Attributes()))
		}
	}
}
