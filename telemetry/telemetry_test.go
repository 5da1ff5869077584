package telemetry

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentsandbox/agentsandbox/internal/otlptest"
)

// TestExport sends a parent and a child span through each encoding to a
// receiver that decodes them with the reference OTLP types, and checks
// ids, links, attributes of every type, status, resource and headers.
func TestExport(t *testing.T) {
	for _, c := range []struct {
		protocol string
		gzip     bool
	}{{ProtocolProtobuf, false}, {ProtocolJSON, false}, {ProtocolProtobuf, true}, {ProtocolJSON, true}} {
		t.Run(c.protocol+map[bool]string{true: "+gzip"}[c.gzip], func(t *testing.T) {
			rcv := otlptest.Start(t)
			p := Start(Config{Endpoint: rcv.URL, Protocol: c.protocol, Gzip: c.gzip, Timeout: 5 * time.Second,
				Headers:  map[string]string{"Authorization": "Bearer t0ken"},
				Resource: []Attr{{"service.name", "svc"}, {"team", "a"}}}, Attr{"service.version", "v9"}, Attr{"team", "overridden"})
			ctx, root := otel.Tracer("test/scope").Start(context.Background(), "root", trace.WithSpanKind(trace.SpanKindServer))
			_, child := otel.Tracer("test/scope").Start(ctx, "child")
			child.SetAttributes(attribute.String("s", "text"), attribute.Int("i", -7), attribute.Bool("b", false),
				attribute.Float64("f", 1.5), attribute.StringSlice("ss", []string{"x", "y"}))
			child.SetStatus(codes.Error, "it broke")
			child.End()
			root.End()
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			if otel.GetTracerProvider() == trace.TracerProvider(p.tp) {
				t.Errorf("the global provider is still the stopped one")
			}
			spans := rcv.Spans()
			if len(spans) != 2 {
				t.Fatalf("received %d spans, want 2: %+v", len(spans), spans)
			}
			byName := map[string]otlptest.Span{}
			for _, s := range spans {
				byName[s.Name] = s
			}
			r, ch := byName["root"], byName["child"]
			rsc := root.SpanContext()
			if r.TraceID != rsc.TraceID().String() || r.SpanID != rsc.SpanID().String() || r.ParentSpanID != "" || r.Kind != 2 {
				t.Errorf("root: %+v, want trace %s span %s, no parent, kind server (2)", r, rsc.TraceID(), rsc.SpanID())
			}
			if ch.TraceID != r.TraceID || ch.ParentSpanID != r.SpanID || ch.Kind != 1 {
				t.Errorf("child: %+v, want the root's trace and the root as parent, kind internal (1)", ch)
			}
			want := map[string]string{"s": "text", "i": "-7", "b": "false", "f": "1.5", "ss": `["x","y"]`}
			for k, v := range want {
				if ch.Attrs[k] != v {
					t.Errorf("child attribute %s = %q, want %q (all: %v)", k, ch.Attrs[k], v, ch.Attrs)
				}
			}
			if ch.StatusCode != 2 || ch.StatusMessage != "it broke" || r.StatusCode != 0 {
				t.Errorf("status: child %d %q, root %d; want error (2) with its message, unset (0)", ch.StatusCode, ch.StatusMessage, r.StatusCode)
			}
			if ch.StartUnixNano == 0 || ch.EndUnixNano < ch.StartUnixNano || ch.Scope != "test/scope" {
				t.Errorf("child times %d..%d scope %q", ch.StartUnixNano, ch.EndUnixNano, ch.Scope)
			}
			if res := r.Resource; res["service.name"] != "svc" || res["service.version"] != "v9" || res["team"] != "a" {
				t.Errorf("resource %v", res)
			}
			for _, req := range rcv.Requests() {
				if req.Header.Get("Authorization") != "Bearer t0ken" {
					t.Errorf("request without the configured header: %v", req.Header)
				}
			}
		})
	}
}

// TestShutdownBounded: a collector that accepts the connection and never
// answers costs Shutdown its bound, not the export timeout, and the
// error says where spans did not go.
func TestShutdownBounded(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-hang }))
	defer srv.Close()
	defer close(hang)
	p := Start(Config{Endpoint: srv.URL + "/v1/traces", Protocol: ProtocolProtobuf, Timeout: time.Minute,
		Resource: []Attr{{"service.name", "x"}}})
	_, s := otel.Tracer("t").Start(context.Background(), "s")
	s.End()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := p.Shutdown(ctx)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("shutdown took %v with a bound of 300ms", took)
	}
	if err == nil || !strings.Contains(err.Error(), srv.URL) {
		t.Errorf("shutdown: %v, want an error naming the endpoint", err)
	}
}

// TestUnreachable: nothing listens at the endpoint; Shutdown returns the
// export's error, which names it.
func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	p := Start(Config{Endpoint: "http://" + addr + "/v1/traces", Protocol: ProtocolJSON, Timeout: 5 * time.Second,
		Resource: []Attr{{"service.name", "x"}}})
	_, s := otel.Tracer("t").Start(context.Background(), "s")
	s.End()
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	err = p.Shutdown(ctx)
	var oe *net.OpError
	if err == nil || !strings.Contains(err.Error(), addr) || !errors.As(err, &oe) {
		t.Errorf("shutdown: %v, want the connection error naming %s", err, addr)
	}
}

// TestErrorMasksPassword: a password in the endpoint never reaches a
// message.
func TestErrorMasksPassword(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	p := Start(Config{Endpoint: "http://user:hunter2@" + addr + "/v1/traces", Protocol: ProtocolProtobuf, Timeout: 5 * time.Second})
	_, s := otel.Tracer("t").Start(context.Background(), "s")
	s.End()
	err = p.Shutdown(context.Background())
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), addr) {
		t.Errorf("shutdown: %v, want the endpoint named without its password", err)
	}
}

// TestCollectorRefuses: a collector's error status and message are in
// the error.
func TestCollectorRefuses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "unauthorized: bad token", http.StatusUnauthorized)
	}))
	defer srv.Close()
	p := Start(Config{Endpoint: srv.URL + "/v1/traces", Protocol: ProtocolProtobuf, Timeout: 5 * time.Second})
	_, s := otel.Tracer("t").Start(context.Background(), "s")
	s.End()
	err := p.Shutdown(context.Background())
	if err == nil || !strings.Contains(err.Error(), "401 Unauthorized: unauthorized: bad token") {
		t.Errorf("shutdown: %v, want the collector's status and message", err)
	}
}
