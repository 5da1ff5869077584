package sandboxes

import (
	"context"
	"path"
	"slices"
	"sort"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
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
func startExecSpan(ctx context.Context, id string, argv []string) (context.Context, trace.Span) {
	return otel.Tracer(TracerName).Start(ctx, "sandbox exec", trace.WithAttributes(
		attribute.String("agentsandbox.sandbox.id", id),
		attribute.String("process.executable.name", path.Base(argv[0]))))
}

// withTraceEnv adds TRACEPARENT (and TRACESTATE) naming the command's span
// to its environment (KEY=VALUE, sorted), as a step's job gets them, so
// that the command's own spans join the trace; the request's env wins. It
// adds nothing when the span is not part of a trace (tracing off).
func withTraceEnv(ctx context.Context, env []string) []string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return env
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	for _, v := range []struct{ name, header string }{{"TRACEPARENT", "traceparent"}, {"TRACESTATE", "tracestate"}} {
		val := carrier[v.header]
		if val == "" || slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, v.name+"=") }) {
			continue
		}
		env = append(env, v.name+"="+val)
	}
	sort.Strings(env)
	return env
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
