package telemetry

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The two encodings of an OTLP ExportTraceServiceRequest
// (opentelemetry-proto, collector/trace/v1): protobuf, written field by
// field below, and the JSON mapping OTLP/HTTP defines (hex trace and span
// ids, enums as numbers, 64-bit integers as strings). Both carry one
// resource (the provider's own, Config.Resource) and one scope per
// instrumentation scope, in the order the spans came.

// scopeGroup is the spans of one instrumentation scope.
type scopeGroup struct {
	name, version string
	spans         []sdktrace.ReadOnlySpan
}

func groupByScope(spans []sdktrace.ReadOnlySpan) []scopeGroup {
	var groups []scopeGroup
	index := map[[2]string]int{}
	for _, s := range spans {
		sc := s.InstrumentationScope()
		k := [2]string{sc.Name, sc.Version}
		i, ok := index[k]
		if !ok {
			i = len(groups)
			index[k] = i
			groups = append(groups, scopeGroup{name: sc.Name, version: sc.Version})
		}
		groups[i].spans = append(groups[i].spans, s)
	}
	return groups
}

// statusCode maps the API's codes to OTLP's (UNSET 0, OK 1, ERROR 2),
// which number them differently.
func statusCode(c codes.Code) int {
	switch c {
	case codes.Ok:
		return 1
	case codes.Error:
		return 2
	}
	return 0
}

func unixNano(t interface{ UnixNano() int64 }) uint64 { return uint64(t.UnixNano()) }

// --- protobuf ---

type pb []byte

func (b pb) tag(field, wire int) pb { return binary.AppendUvarint(b, uint64(field)<<3|uint64(wire)) }
func (b pb) varint(field int, v uint64) pb {
	if v == 0 {
		return b
	}
	return binary.AppendUvarint(b.tag(field, 0), v)
}
func (b pb) fixed64(field int, v uint64) pb {
	if v == 0 {
		return b
	}
	return binary.LittleEndian.AppendUint64(b.tag(field, 1), v)
}
func (b pb) fixed32(field int, v uint32) pb {
	if v == 0 {
		return b
	}
	return binary.LittleEndian.AppendUint32(b.tag(field, 5), v)
}
func (b pb) bytes(field int, v []byte) pb {
	b = binary.AppendUvarint(b.tag(field, 2), uint64(len(v)))
	return append(b, v...)
}
func (b pb) str(field int, v string) pb {
	if v == "" {
		return b
	}
	b = binary.AppendUvarint(b.tag(field, 2), uint64(len(v)))
	return append(b, v...)
}

// msg appends the message fill appends as field: in place, its length
// written before it afterwards (one byte reserved, the rest shifted in
// when it is 128 bytes or longer).
func (b pb) msg(field int, fill func(pb) pb) pb {
	b = append(b.tag(field, 2), 0)
	at := len(b) - 1
	b = fill(b)
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b
	}
	var l [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(l[:], uint64(n))
	b = append(b, l[:k-1]...)
	copy(b[at+k:], b[at+1:at+1+n])
	copy(b[at:], l[:k])
	return b
}

// anyValue is an AnyValue: string 1, bool 2, int 3, double 4, array 5.
func anyValue(b pb, v attribute.Value) pb {
	switch v.Type() {
	case attribute.BOOL:
		if v.AsBool() {
			return b.varint(2, 1)
		}
		return append(b.tag(2, 0), 0)
	case attribute.INT64:
		return binary.AppendUvarint(b.tag(3, 0), uint64(v.AsInt64()))
	case attribute.FLOAT64:
		return binary.LittleEndian.AppendUint64(b.tag(4, 1), math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		return b.bytes(1, []byte(v.AsString()))
	case attribute.BOOLSLICE, attribute.INT64SLICE, attribute.FLOAT64SLICE, attribute.STRINGSLICE:
		return b.msg(5, func(a pb) pb {
			for _, e := range sliceValues(v) {
				a = a.msg(1, func(m pb) pb { return anyValue(m, e) })
			}
			return a
		})
	}
	return b.bytes(1, []byte(v.Emit()))
}

func sliceValues(v attribute.Value) []attribute.Value {
	var out []attribute.Value
	switch v.Type() {
	case attribute.BOOLSLICE:
		for _, e := range v.AsBoolSlice() {
			out = append(out, attribute.BoolValue(e))
		}
	case attribute.INT64SLICE:
		for _, e := range v.AsInt64Slice() {
			out = append(out, attribute.Int64Value(e))
		}
	case attribute.FLOAT64SLICE:
		for _, e := range v.AsFloat64Slice() {
			out = append(out, attribute.Float64Value(e))
		}
	case attribute.STRINGSLICE:
		for _, e := range v.AsStringSlice() {
			out = append(out, attribute.StringValue(e))
		}
	}
	return out
}

// keyValues appends attrs as the repeated KeyValue field.
func keyValues(b pb, field int, attrs []attribute.KeyValue) pb {
	for _, kv := range attrs {
		b = b.msg(field, func(m pb) pb {
			m = m.str(1, string(kv.Key))
			return m.msg(2, func(a pb) pb { return anyValue(a, kv.Value) })
		})
	}
	return b
}

// encodeProtobuf is the request's protobuf encoding.
func encodeProtobuf(resource []attribute.KeyValue, spans []sdktrace.ReadOnlySpan) []byte {
	var b pb
	b = b.msg(1, func(rs pb) pb { // ResourceSpans
		rs = rs.msg(1, func(r pb) pb { return keyValues(r, 1, resource) })
		for _, g := range groupByScope(spans) {
			rs = rs.msg(2, func(ss pb) pb { // ScopeSpans
				ss = ss.msg(1, func(sc pb) pb { return sc.str(1, g.name).str(2, g.version) })
				for _, s := range g.spans {
					ss = ss.msg(2, func(m pb) pb { return protoSpan(m, s) })
				}
				return ss
			})
		}
		return rs
	})
	return b
}

func protoSpan(m pb, s sdktrace.ReadOnlySpan) pb {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	m = m.bytes(1, tid[:]).bytes(2, sid[:]).str(3, sc.TraceState().String())
	if p := s.Parent(); p.SpanID().IsValid() {
		psid := p.SpanID()
		m = m.bytes(4, psid[:])
	}
	m = m.str(5, s.Name()).varint(6, uint64(s.SpanKind()))
	m = m.fixed64(7, unixNano(s.StartTime())).fixed64(8, unixNano(s.EndTime()))
	m = keyValues(m, 9, s.Attributes()).varint(10, uint64(s.DroppedAttributes()))
	for _, e := range s.Events() {
		m = m.msg(11, func(ev pb) pb {
			ev = ev.fixed64(1, unixNano(e.Time)).str(2, e.Name)
			return keyValues(ev, 3, e.Attributes).varint(4, uint64(e.DroppedAttributeCount))
		})
	}
	m = m.varint(12, uint64(s.DroppedEvents()))
	for _, l := range s.Links() {
		m = m.msg(13, func(lk pb) pb {
			ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
			lk = lk.bytes(1, ltid[:]).bytes(2, lsid[:]).str(3, l.SpanContext.TraceState().String())
			lk = keyValues(lk, 4, l.Attributes).varint(5, uint64(l.DroppedAttributeCount))
			return lk.fixed32(6, uint32(l.SpanContext.TraceFlags()))
		})
	}
	m = m.varint(14, uint64(s.DroppedLinks()))
	if st := s.Status(); st.Code != codes.Unset {
		m = m.msg(15, func(x pb) pb { return x.str(2, st.Description).varint(3, uint64(statusCode(st.Code))) })
	}
	return m.fixed32(16, spanFlags(s))
}

// spanFlags are the W3C trace flags, with the bits that say whether the
// parent is remote (0x100: known, 0x200: remote).
func spanFlags(s sdktrace.ReadOnlySpan) uint32 {
	f := uint32(s.SpanContext().TraceFlags()) | 0x100
	if s.Parent().IsRemote() {
		f |= 0x200
	}
	return f
}

// --- JSON ---

type jsonRequest struct {
	ResourceSpans []jsonResourceSpans `json:"resourceSpans"`
}

type jsonResourceSpans struct {
	Resource   jsonResource     `json:"resource"`
	ScopeSpans []jsonScopeSpans `json:"scopeSpans"`
}

type jsonResource struct {
	Attributes []jsonKV `json:"attributes"`
}

type jsonScopeSpans struct {
	Scope jsonScope  `json:"scope"`
	Spans []jsonSpan `json:"spans"`
}

type jsonScope struct {
	Name    string `json:"name,omitempty"`
	Version string `json:"version,omitempty"`
}

type jsonSpan struct {
	TraceID           string      `json:"traceId"`
	SpanID            string      `json:"spanId"`
	TraceState        string      `json:"traceState,omitempty"`
	ParentSpanID      string      `json:"parentSpanId,omitempty"`
	Flags             uint32      `json:"flags,omitempty"`
	Name              string      `json:"name"`
	Kind              int         `json:"kind"`
	StartTimeUnixNano string      `json:"startTimeUnixNano"`
	EndTimeUnixNano   string      `json:"endTimeUnixNano"`
	Attributes        []jsonKV    `json:"attributes,omitempty"`
	DroppedAttributes int         `json:"droppedAttributesCount,omitempty"`
	Events            []jsonEvent `json:"events,omitempty"`
	DroppedEvents     int         `json:"droppedEventsCount,omitempty"`
	Links             []jsonLink  `json:"links,omitempty"`
	DroppedLinks      int         `json:"droppedLinksCount,omitempty"`
	Status            *jsonStatus `json:"status,omitempty"`
}

type jsonEvent struct {
	TimeUnixNano string   `json:"timeUnixNano"`
	Name         string   `json:"name"`
	Attributes   []jsonKV `json:"attributes,omitempty"`
}

type jsonLink struct {
	TraceID    string   `json:"traceId"`
	SpanID     string   `json:"spanId"`
	TraceState string   `json:"traceState,omitempty"`
	Attributes []jsonKV `json:"attributes,omitempty"`
}

type jsonStatus struct {
	Message string `json:"message,omitempty"`
	Code    int    `json:"code,omitempty"`
}

type jsonKV struct {
	Key   string    `json:"key"`
	Value jsonValue `json:"value"`
}

type jsonValue struct {
	String *string    `json:"stringValue,omitempty"`
	Bool   *bool      `json:"boolValue,omitempty"`
	Int    *string    `json:"intValue,omitempty"`
	Double *float64   `json:"doubleValue,omitempty"`
	Array  *jsonArray `json:"arrayValue,omitempty"`
}

type jsonArray struct {
	Values []jsonValue `json:"values"`
}

func jsonAny(v attribute.Value) jsonValue {
	switch v.Type() {
	case attribute.BOOL:
		b := v.AsBool()
		return jsonValue{Bool: &b}
	case attribute.INT64:
		s := strconv.FormatInt(v.AsInt64(), 10)
		return jsonValue{Int: &s}
	case attribute.FLOAT64:
		f := v.AsFloat64()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			s := v.Emit()
			return jsonValue{String: &s}
		}
		return jsonValue{Double: &f}
	case attribute.BOOLSLICE, attribute.INT64SLICE, attribute.FLOAT64SLICE, attribute.STRINGSLICE:
		a := &jsonArray{Values: []jsonValue{}}
		for _, e := range sliceValues(v) {
			a.Values = append(a.Values, jsonAny(e))
		}
		return jsonValue{Array: a}
	}
	s := v.Emit()
	return jsonValue{String: &s}
}

func jsonKVs(attrs []attribute.KeyValue) []jsonKV {
	var out []jsonKV
	for _, kv := range attrs {
		out = append(out, jsonKV{Key: string(kv.Key), Value: jsonAny(kv.Value)})
	}
	return out
}

// encodeJSON is the request's OTLP/JSON encoding.
func encodeJSON(resource []attribute.KeyValue, spans []sdktrace.ReadOnlySpan) ([]byte, error) {
	rs := jsonResourceSpans{Resource: jsonResource{Attributes: jsonKVs(resource)}}
	for _, g := range groupByScope(spans) {
		ss := jsonScopeSpans{Scope: jsonScope{Name: g.name, Version: g.version}}
		for _, s := range g.spans {
			sc := s.SpanContext()
			js := jsonSpan{
				TraceID: sc.TraceID().String(), SpanID: sc.SpanID().String(),
				TraceState: sc.TraceState().String(), Flags: spanFlags(s),
				Name: s.Name(), Kind: int(s.SpanKind()),
				StartTimeUnixNano: strconv.FormatUint(unixNano(s.StartTime()), 10),
				EndTimeUnixNano:   strconv.FormatUint(unixNano(s.EndTime()), 10),
				Attributes:        jsonKVs(s.Attributes()), DroppedAttributes: s.DroppedAttributes(),
				DroppedEvents: s.DroppedEvents(), DroppedLinks: s.DroppedLinks(),
			}
			if p := s.Parent(); p.SpanID().IsValid() {
				js.ParentSpanID = p.SpanID().String()
			}
			for _, e := range s.Events() {
				js.Events = append(js.Events, jsonEvent{TimeUnixNano: strconv.FormatUint(unixNano(e.Time), 10), Name: e.Name, Attributes: jsonKVs(e.Attributes)})
			}
			for _, l := range s.Links() {
				js.Links = append(js.Links, jsonLink{TraceID: l.SpanContext.TraceID().String(), SpanID: l.SpanContext.SpanID().String(),
					TraceState: l.SpanContext.TraceState().String(), Attributes: jsonKVs(l.Attributes)})
			}
			if st := s.Status(); st.Code != codes.Unset {
				js.Status = &jsonStatus{Message: st.Description, Code: statusCode(st.Code)}
			}
			ss.Spans = append(ss.Spans, js)
		}
		rs.ScopeSpans = append(rs.ScopeSpans, ss)
	}
	return json.Marshal(jsonRequest{ResourceSpans: []jsonResourceSpans{rs}})
}
