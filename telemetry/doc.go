// Package telemetry sets up OpenTelemetry tracing for the CLI and the
// server from the standard OTEL_* environment variables, and exports spans
// over OTLP/HTTP with a small exporter of its own (JSON or protobuf
// encoding, net/http), not the OTLP exporter module, whose gRPC and
// gateway dependencies cost every command start-up even with tracing off
// (docs/observability.md has the figures).
//
// Tracing is off unless the environment asks for it: FromEnv reports
// enabled only when OTEL_TRACES_EXPORTER=otlp or an OTLP endpoint is set,
// and OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off
// again. Off, nothing is started (no goroutine, no listener, no
// connection) and the global tracer provider stays OpenTelemetry's no-op.
//
//	cfg, on, err := telemetry.FromEnv(os.Getenv)
//	p, err := telemetry.Start(cfg)   // when on: the global provider
//	defer p.Shutdown(ctx)             // flush, bounded by ctx
//
// Code that makes spans uses the OpenTelemetry API (otel.Tracer) and never
// this package, so it costs nothing when tracing is off.
package telemetry
