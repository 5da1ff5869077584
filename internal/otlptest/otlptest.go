// Package otlptest is test support: an OTLP/HTTP trace receiver on
// loopback (httptest) that decodes export requests, protobuf with the
// reference OTLP types and JSON by the OTLP/JSON mapping, and keeps the
// spans for a test to look at.
package otlptest

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
)

// Span is one received span, its ids in hex and its attribute values as
// text (ints in decimal, bools as true/false).
type Span struct {
	TraceID, SpanID, ParentSpanID, TraceState string
	Name                                      string
	Kind                                      int
	StartUnixNano, EndUnixNano                uint64
	Attrs                                     map[string]string
	StatusCode                                int // OTLP's: 0 unset, 1 ok, 2 error
	StatusMessage                             string
	Scope                                     string
	Resource                                  map[string]string
}

// Request is what one export request carried besides its spans.
type Request struct {
	Header http.Header
	Spans  int
}

// Receiver is a running receiver; URL is its traces endpoint.
type Receiver struct {
	URL string
	srv *httptest.Server

	mu       sync.Mutex
	spans    []Span
	requests []Request
	errs     []error
}

// Start starts a receiver on loopback that t stops at its end, and fails
// t then if a request could not be decoded.
func Start(t testing.TB) *Receiver {
	r := &Receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	r.URL = r.srv.URL + "/v1/traces"
	t.Cleanup(func() {
		r.srv.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, err := range r.errs {
			t.Errorf("otlp receiver: %v", err)
		}
	})
	return r
}

// Spans are the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Requests are the export requests received so far.
func (r *Receiver) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.requests...)
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	spans, err := decode(req)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs = append(r.errs, err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.spans = append(r.spans, spans...)
	r.requests = append(r.requests, Request{Header: req.Header.Clone(), Spans: len(spans)})
	if req.Header.Get("Content-Type") == "application/json" {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "{}")
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
}

func decode(req *http.Request) ([]Span, error) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		return nil, fmt.Errorf("%s %s: want POST /v1/traces", req.Method, req.URL.Path)
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			return nil, fmt.Errorf("gunzip: %w", err)
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	switch ct := req.Header.Get("Content-Type"); ct {
	case "application/x-protobuf":
		// TracesData has ExportTraceServiceRequest's wire form.
		var td tracepb.TracesData
		if err := proto.Unmarshal(data, &td); err != nil {
			return nil, fmt.Errorf("decode protobuf: %w", err)
		}
		return fromProto(&td), nil
	case "application/json":
		return fromJSON(data)
	default:
		return nil, fmt.Errorf("content type %q", ct)
	}
}

func fromProto(td *tracepb.TracesData) []Span {
	var out []Span
	for _, rs := range td.GetResourceSpans() {
		res := protoAttrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				out = append(out, Span{
					TraceID: fmt.Sprintf("%x", s.GetTraceId()), SpanID: fmt.Sprintf("%x", s.GetSpanId()),
					ParentSpanID: fmt.Sprintf("%x", s.GetParentSpanId()), TraceState: s.GetTraceState(),
					Name: s.GetName(), Kind: int(s.GetKind()),
					StartUnixNano: s.GetStartTimeUnixNano(), EndUnixNano: s.GetEndTimeUnixNano(),
					Attrs:      protoAttrs(s.GetAttributes()),
					StatusCode: int(s.GetStatus().GetCode()), StatusMessage: s.GetStatus().GetMessage(),
					Scope: ss.GetScope().GetName(), Resource: res,
				})
			}
		}
	}
	return out
}

func protoAttrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.GetKey()] = protoValue(kv.GetValue())
	}
	return m
}

func protoValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.GetValues() {
			parts = append(parts, protoValue(e))
		}
		b, _ := json.Marshal(parts)
		return string(b)
	}
	return fmt.Sprintf("%v", v)
}

// The OTLP/JSON mapping: ids in hex, enums as numbers, 64-bit integers as
// strings (or numbers).
type jsonKV struct {
	Key   string    `json:"key"`
	Value jsonValue `json:"value"`
}

type jsonValue struct {
	StringValue *string                       `json:"stringValue"`
	BoolValue   *bool                         `json:"boolValue"`
	IntValue    *json.Number                  `json:"intValue"`
	DoubleValue *float64                      `json:"doubleValue"`
	ArrayValue  *struct{ Values []jsonValue } `json:"arrayValue"`
}

func (v jsonValue) text() string {
	switch {
	case v.StringValue != nil:
		return *v.StringValue
	case v.BoolValue != nil:
		return strconv.FormatBool(*v.BoolValue)
	case v.IntValue != nil:
		return v.IntValue.String()
	case v.DoubleValue != nil:
		return strconv.FormatFloat(*v.DoubleValue, 'g', -1, 64)
	case v.ArrayValue != nil:
		var parts []string
		for _, e := range v.ArrayValue.Values {
			parts = append(parts, e.text())
		}
		b, _ := json.Marshal(parts)
		return string(b)
	}
	return ""
}

func jsonAttrs(kvs []jsonKV) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.text()
	}
	return m
}

func fromJSON(data []byte) ([]Span, error) {
	var req struct {
		ResourceSpans []struct {
			Resource struct {
				Attributes []jsonKV `json:"attributes"`
			} `json:"resource"`
			ScopeSpans []struct {
				Scope struct {
					Name string `json:"name"`
				} `json:"scope"`
				Spans []struct {
					TraceID           string      `json:"traceId"`
					SpanID            string      `json:"spanId"`
					ParentSpanID      string      `json:"parentSpanId"`
					TraceState        string      `json:"traceState"`
					Name              string      `json:"name"`
					Kind              int         `json:"kind"`
					StartTimeUnixNano json.Number `json:"startTimeUnixNano"`
					EndTimeUnixNano   json.Number `json:"endTimeUnixNano"`
					Attributes        []jsonKV    `json:"attributes"`
					Status            struct {
						Code    int    `json:"code"`
						Message string `json:"message"`
					} `json:"status"`
				} `json:"spans"`
			} `json:"scopeSpans"`
		} `json:"resourceSpans"`
	}
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, fmt.Errorf("decode json: %w", err)
	}
	var out []Span
	for _, rs := range req.ResourceSpans {
		res := jsonAttrs(rs.Resource.Attributes)
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				start, err1 := strconv.ParseUint(s.StartTimeUnixNano.String(), 10, 64)
				end, err2 := strconv.ParseUint(s.EndTimeUnixNano.String(), 10, 64)
				if err1 != nil || err2 != nil {
					return nil, fmt.Errorf("span %q: times %q and %q are not decimal nanoseconds", s.Name, s.StartTimeUnixNano, s.EndTimeUnixNano)
				}
				out = append(out, Span{
					TraceID: s.TraceID, SpanID: s.SpanID, ParentSpanID: s.ParentSpanID, TraceState: s.TraceState,
					Name: s.Name, Kind: s.Kind, StartUnixNano: start, EndUnixNano: end,
					Attrs:      jsonAttrs(s.Attributes),
					StatusCode: s.Status.Code, StatusMessage: s.Status.Message,
					Scope: ss.Scope.Name, Resource: res,
				})
			}
		}
	}
	return out, nil
}
