package e2b

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// The Connect protocol (connectrpc.com/docs/protocol) as envd speaks it
// to the SDK: POST only, the JSON codec, no compression. A unary call is
// one JSON message each way; a server stream is one request envelope and
// a sequence of response envelopes ending with an end-of-stream one. An
// envelope is a flags byte, a big-endian uint32 length and that many
// bytes of JSON.

// Envelope flags.
const (
	flagCompressed = 0x01
	flagEndStream  = 0x02
)

// Content types of the JSON codec.
const (
	unaryType  = "application/json"
	streamType = "application/connect+json"
)

// maxMessageBytes bounds one request message (envd's requests are a few
// hundred bytes: a command line, a path).
const maxMessageBytes = 1 << 20

// readEnvelope reads one envelope of at most max bytes of payload. A
// compressed envelope is refused: no compression is offered.
func readEnvelope(r io.Reader, max int) (flags byte, payload []byte, err error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		if err == io.EOF {
			return 0, nil, io.EOF
		}
		return 0, nil, fmt.Errorf("read a Connect envelope's 5-byte head: %w", err)
	}
	flags = head[0]
	n := binary.BigEndian.Uint32(head[1:])
	if flags&flagCompressed != 0 {
		return 0, nil, fmt.Errorf("a compressed Connect envelope: this server offers no compression; send Connect-Content-Encoding identity")
	}
	if flags&^byte(flagCompressed|flagEndStream) != 0 {
		return 0, nil, fmt.Errorf("a Connect envelope with unknown flags %#02x", flags)
	}
	if uint64(n) > uint64(max) {
		return 0, nil, fmt.Errorf("a Connect envelope of %d bytes: the most this server takes is %d", n, max)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, fmt.Errorf("read a Connect envelope's %d bytes: %w", n, err)
	}
	return flags, payload, nil
}

// appendEnvelope appends the envelope of payload to b.
func appendEnvelope(b []byte, flags byte, payload []byte) []byte {
	b = append(b, flags, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[len(b)-4:], uint32(len(payload)))
	return append(b, payload...)
}

// Connect error codes (the ones this server answers).
const (
	codeCanceled           = "canceled"
	codeUnknown            = "unknown"
	codeInvalidArgument    = "invalid_argument"
	codeDeadlineExceeded   = "deadline_exceeded"
	codeNotFound           = "not_found"
	codeAlreadyExists      = "already_exists"
	codePermissionDenied   = "permission_denied"
	codeResourceExhausted  = "resource_exhausted"
	codeFailedPrecondition = "failed_precondition"
	codeUnimplemented      = "unimplemented"
	codeInternal           = "internal"
	codeUnavailable        = "unavailable"
	codeUnauthenticated    = "unauthenticated"
)

// connectStatus is the HTTP status of a unary call's error code.
func connectStatus(code string) int {
	switch code {
	case codeCanceled:
		return 499
	case codeInvalidArgument, codeFailedPrecondition:
		return http.StatusBadRequest
	case codeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case codeNotFound:
		return http.StatusNotFound
	case codeAlreadyExists:
		return http.StatusConflict
	case codePermissionDenied:
		return http.StatusForbidden
	case codeResourceExhausted:
		return http.StatusTooManyRequests
	case codeUnimplemented:
		return http.StatusNotImplemented
	case codeUnavailable:
		return http.StatusServiceUnavailable
	case codeUnauthenticated:
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

// connectCode is the Connect code of a Manager error's code.
func connectCode(c sandboxes.Code) string {
	switch c {
	case sandboxes.CodeBadRequest:
		return codeInvalidArgument
	case sandboxes.CodeNotFound:
		return codeNotFound
	case sandboxes.CodeConflict:
		return codeFailedPrecondition
	case sandboxes.CodeTooLarge, sandboxes.CodeLimit:
		return codeResourceExhausted
	case sandboxes.CodeDenied:
		return codePermissionDenied
	case sandboxes.CodeAuth:
		return codeUnauthenticated
	case sandboxes.CodeStopped:
		return codeUnavailable
	case sandboxes.CodeUnsupport:
		return codeUnimplemented
	case sandboxes.CodeTimeout:
		return codeDeadlineExceeded
	}
	return codeInternal
}

// rpcError is a Connect error: the body of a failed unary call, the
// error of an end-of-stream envelope.
type rpcError struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

func (e *rpcError) Error() string { return e.Code + ": " + e.Message }

// rpcErrorf makes an *rpcError.
func rpcErrorf(code, format string, a ...any) *rpcError {
	return &rpcError{Code: code, Message: fmt.Sprintf(format, a...)}
}

// asRPCError is err as a Connect error: an *rpcError as it is, a
// Manager error by its code, anything else internal.
func asRPCError(err error) *rpcError {
	if e, ok := err.(*rpcError); ok {
		return e
	}
	return &rpcError{Code: connectCode(sandboxes.CodeOf(err)), Message: err.Error()}
}

// writeUnaryError answers a unary call's error.
func writeUnaryError(w http.ResponseWriter, err error) {
	e := asRPCError(err)
	writeJSON(w, connectStatus(e.Code), unaryType, e)
}

func writeJSON(w http.ResponseWriter, status int, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"code":"internal","message":"encode the answer"}`)
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// endStream is the JSON of an end-of-stream envelope.
type endStream struct {
	Error *rpcError `json:"error,omitempty"`
}

// decodeMessage reads a message's JSON into v. Unknown fields are
// ignored, as protobuf's JSON readers do for messages of a newer schema.
func decodeMessage(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return rpcErrorf(codeInvalidArgument, "the request message is not the JSON of a %T: %v", v, err)
	}
	return nil
}

// readUnary reads a unary call's request message into v.
func readUnary(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != unaryType {
		return rpcErrorf(codeInvalidArgument, "Content-Type %q: this server speaks Connect's JSON codec, %s", ct, unaryType)
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxMessageBytes+1))
	if err != nil {
		return rpcErrorf(codeInvalidArgument, "read the request: %v", err)
	}
	if len(b) > maxMessageBytes {
		return rpcErrorf(codeResourceExhausted, "the request message is over %d bytes", maxMessageBytes)
	}
	if len(b) == 0 {
		return nil
	}
	return decodeMessage(b, v)
}

// readStreamRequest reads a server stream's one request envelope into v.
func readStreamRequest(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != streamType {
		return rpcErrorf(codeInvalidArgument, "Content-Type %q: this server speaks Connect's JSON codec, %s", ct, streamType)
	}
	flags, b, err := readEnvelope(r.Body, maxMessageBytes)
	if err != nil {
		return rpcErrorf(codeInvalidArgument, "%v", err)
	}
	if flags&flagEndStream != 0 {
		return rpcErrorf(codeInvalidArgument, "the request's first envelope ends the stream: send the request message first")
	}
	return decodeMessage(b, v)
}

// timeoutOf reads Connect-Timeout-Ms: 0 (or none) is no timeout.
func timeoutOf(r *http.Request) (time.Duration, error) {
	v := r.Header.Get("Connect-Timeout-Ms")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || len(v) > 10 {
		return 0, rpcErrorf(codeInvalidArgument, "Connect-Timeout-Ms %q: want a whole number of milliseconds, at most 10 digits", v)
	}
	return time.Duration(n) * time.Millisecond, nil
}
