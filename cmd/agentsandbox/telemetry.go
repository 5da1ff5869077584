package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/telemetry"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Tracing (docs/observability.md). Execute starts it from the OTEL_*
// environment variables for every command and stops it at the end; off
// (the default) it starts nothing and the spans below cost a no-op.

// cliTracer is the instrumentation scope of the CLI's own spans.
const cliTracer = "github.com/agentsandbox/agentsandbox/cmd/agentsandbox"

// startTelemetry installs the tracer provider the environment asks for
// and returns what stops it: it exports what is left, waiting at most
// telemetry.ShutdownTimeout, and says on stderr, in one line, when spans
// did not get through. A setting it cannot honour (grpc) is one warning
// line and tracing off; tracing never fails a command.
func startTelemetry(stderr io.Writer) (stop func()) {
	cfg, on, err := telemetry.FromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "warning: tracing off: %v\n", err)
		return func() {}
	}
	if !on {
		return func() {}
	}
	p := telemetry.Start(cfg, telemetry.Attr{Key: "service.version", Value: toolVersion()})
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), telemetry.ShutdownTimeout)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			fmt.Fprintf(stderr, "warning: traces may be incomplete: %v\n", err)
		}
	}
}

// traceApply starts apply's span, the root of the run's trace, or a child
// of the trace in $TRACEPARENT (W3C trace context) when a caller (a CI
// job, an agent) passed one. end ends it with err.
func traceApply(ctx context.Context) (_ context.Context, end func(error)) {
	if tp := os.Getenv("TRACEPARENT"); tp != "" {
		ctx = otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier{"traceparent": tp, "tracestate": os.Getenv("TRACESTATE")})
	}
	ctx, span := otel.Tracer(cliTracer).Start(ctx, "apply", trace.WithSpanKind(trace.SpanKindServer))
	return ctx, func(err error) {
		var silent *reportedError
		if err != nil && !errors.As(err, &silent) {
			span.SetStatus(codes.Error, err.Error())
		} else if err != nil {
			span.SetStatus(codes.Error, fmt.Sprintf("exit status %d", exitCode(err)))
		}
		span.End()
	}
}

// ensureApplySpan gives a run whose caller started no apply span
// (rerun) one from here on, named after w, so that the engine's spans
// share one trace; end ends it. A caller that did (apply) keeps its own.
func ensureApplySpan(ctx context.Context, w *workflow.Workflow) (_ context.Context, end func()) {
	if trace.SpanFromContext(ctx).IsRecording() {
		return ctx, func() {}
	}
	ctx, endApply := traceApply(ctx)
	traceWorkflow(ctx, w)
	return ctx, func() { endApply(nil) }
}

// tracePhase starts a span named name under ctx's for a phase of the
// command; end ends it with err.
func tracePhase(ctx context.Context, name string) (end func(error)) {
	_, span := otel.Tracer(cliTracer).Start(ctx, name)
	return func(err error) {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// traceWorkflow names apply's span after the workflow, once it is parsed.
func traceWorkflow(ctx context.Context, w *workflow.Workflow) {
	span := trace.SpanFromContext(ctx)
	span.SetName("apply " + w.Name)
	span.SetAttributes(attribute.String("cicd.pipeline.name", w.Name))
}

// traceRun puts how the run ended on apply's span: its result (the
// semantic conventions' cicd.pipeline.result) and record id.
func traceRun(ctx context.Context, res *engine.Result, err error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	result := "error"
	switch {
	case errors.Is(err, context.Canceled):
		result = "cancellation"
	case res != nil && err == nil && res.Record.Status == record.StatusSucceeded:
		result = "success"
	case res != nil && err == nil:
		result = "failure"
	}
	span.SetAttributes(attribute.String("cicd.pipeline.result", result))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	if res != nil {
		span.SetAttributes(attribute.String("agentsandbox.record.id", res.ID.String()))
	}
}
