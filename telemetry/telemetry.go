package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ShutdownTimeout is how long a command waits at its end for its spans
// to reach the collector. A collector that is slower, unreachable or
// refuses them costs the command at most this, and one warning line.
const ShutdownTimeout = 3 * time.Second

// Provider is a started tracer provider: the global one until Shutdown.
type Provider struct {
	tp       *sdktrace.TracerProvider
	exp      *exporter
	previous trace.TracerProvider
	prevProp propagation.TextMapPropagator
}

// Start makes a tracer provider that exports to cfg with a batching span
// processor, and installs it as OpenTelemetry's global provider, with the
// W3C trace-context propagator. extra are resource attributes of the
// caller's (service.version), which cfg's own override.
func Start(cfg Config, extra ...Attr) *Provider {
	attrs := map[string]string{}
	for _, a := range extra {
		attrs[a.Key] = a.Value
	}
	for _, a := range cfg.Resource {
		attrs[a.Key] = a.Value
	}
	var kvs []attribute.KeyValue
	for k, v := range attrs {
		kvs = append(kvs, attribute.String(k, v))
	}
	res := sdkresource.NewSchemaless(kvs...) // sorted by key
	exp := newExporter(cfg, res.Attributes())
	// The SDK reports each failed export (and a sampler setting it cannot
	// read) to the global error handler, whose default logs a line for
	// every one. The exporter keeps its first failure itself, and Shutdown
	// returns it once.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithBatcher(exp, sdktrace.WithExportTimeout(cfg.Timeout)),
	)
	p := &Provider{tp: tp, exp: exp, previous: otel.GetTracerProvider(), prevProp: otel.GetTextMapPropagator()}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return p
}

// Shutdown exports what is left and stops the provider, waiting at most
// until ctx is done; then it cancels any export still in flight. The
// previous global provider is restored. The error says why spans may not
// have reached the collector (the first export failure, or the timeout).
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	err := p.tp.Shutdown(ctx)
	p.exp.abort()
	otel.SetTracerProvider(p.previous)
	otel.SetTextMapPropagator(p.prevProp)
	if first := p.exp.firstError(); first != nil {
		return first
	}
	if err != nil {
		return fmt.Errorf("export spans to %s: not done in time, the rest dropped: %w", p.exp.where, err)
	}
	return nil
}

// exporter posts spans to the OTLP/HTTP endpoint.
type exporter struct {
	cfg      Config
	where    string // the endpoint for messages, its password masked
	resource []attribute.KeyValue
	client   *http.Client
	ctx      context.Context // cancelled by abort: in-flight requests end
	cancel   context.CancelFunc

	mu    sync.Mutex
	first error
}

func newExporter(cfg Config, resource []attribute.KeyValue) *exporter {
	ctx, cancel := context.WithCancel(context.Background())
	where := cfg.Endpoint
	if u, err := url.Parse(cfg.Endpoint); err == nil {
		where = u.Redacted()
	}
	return &exporter{cfg: cfg, where: where, resource: resource, ctx: ctx, cancel: cancel,
		client: &http.Client{Timeout: cfg.Timeout, Transport: http.DefaultTransport.(*http.Transport).Clone()}}
}

func (e *exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	var body []byte
	contentType := "application/x-protobuf"
	if e.cfg.Protocol == ProtocolJSON {
		var err error
		if body, err = encodeJSON(e.resource, spans); err != nil {
			return fmt.Errorf("encode spans: %w", err)
		}
		contentType = "application/json"
	} else {
		body = encodeProtobuf(e.resource, spans)
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	defer context.AfterFunc(e.ctx, stop)()
	if err := e.post(ctx, body, contentType); err != nil {
		err = fmt.Errorf("export %d spans to %s: %w", len(spans), e.where, err)
		if e.ctx.Err() == nil { // not cut short by Shutdown
			e.fail(err)
		}
		return err
	}
	return nil
}

func (e *exporter) post(ctx context.Context, body []byte, contentType string) error {
	if e.cfg.Gzip {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(body)
		if err := zw.Close(); err != nil {
			return err
		}
		body = z.Bytes()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.cfg.Endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range e.cfg.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", contentType)
	if e.cfg.Gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the collector answered %s: %s", resp.Status, strings.TrimSpace(printable(msg)))
	}
	return nil
}

// printable keeps what a person can read of a response body (a protobuf
// Status is binary).
func printable(b []byte) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || (r >= ' ' && r != 0x7f && r != 0xfffd) {
			return r
		}
		return -1
	}, string(b))
}

func (e *exporter) Shutdown(context.Context) error {
	e.client.CloseIdleConnections()
	return nil
}

// abort cancels exports still in flight and drops idle connections.
func (e *exporter) abort() {
	e.cancel()
	e.client.CloseIdleConnections()
}

func (e *exporter) fail(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.first == nil {
		e.first = err
	}
}

func (e *exporter) firstError() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.first
}
