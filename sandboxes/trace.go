package sandboxes

import (
	"context"
	"path"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Tracing: each command run in a sandbox is a "sandbox exec" span under
// the request's context, from its start until it ends (a background
// command's span outlives its request). It is a no-op unless the process
// installed a tracer provider (package telemetry, docs/observability.md).

// TracerName is the instrumentation scope of the manager's spans.
const TracerName = "github.com/agentsandbox/agentsandbox/sandboxes"

// startExecSpan starts the span of a command about to run in sandbox id.
// It names the program, not its arguments, which may hold secrets.
func startExecSpan(ctx context.Context, id string, argv []string) trace.Span {
	_, span := otel.Tracer(TracerName).Start(ctx, "sandbox exec", trace.WithAttributes(
		attribute.String("agentsandbox.sandbox.id", id),
		attribute.String("process.executable.name", path.Base(argv[0]))))
	return span
}

// endExecSpan ends the span of a command: its exec id and exit, or why it
// did not run to an exit (status error).
func endExecSpan(span trace.Span, execID string, exit *ExitStatus, failed string) {
	span.SetAttributes(attribute.String("agentsandbox.exec.id", execID))
	switch {
	case exit != nil:
		span.SetAttributes(attribute.Int("process.exit.code", exit.ExitCode))
		if exit.Signal != "" {
			span.SetAttributes(attribute.String("agentsandbox.signal", exit.Signal))
		}
		if exit.TimedOut {
			span.SetAttributes(attribute.Bool("agentsandbox.timed_out", true))
		}
	case failed != "":
		span.SetStatus(codes.Error, failed)
	}
	span.End()
}
