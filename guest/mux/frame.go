// Package mux carries many independent byte streams over one connection:
// the session protocol's connections (guest/session.go) between the host
// and a VM's agent over one virtio-serial port, where a unix socket cannot
// reach (docs/guest-protocol.md, "The VM transport").
//
// Every frame is a 9-byte header (type, stream id, payload length, all
// big-endian) and at most MaxPayload bytes of payload. The client (the
// host) opens streams; the server (the agent) accepts them. Each stream is
// like one connection: data both ways, a half-close (CloseWrite, the peer
// reads EOF), and a reset. Each direction of each stream has its own
// credit of Window bytes: a sender never has more than that unread at the
// receiver, and the receiver returns credit as its reader consumes, so one
// stream whose reader stalls neither blocks the others nor grows memory.
//
// The decoder trusts nothing it reads: a length over MaxPayload, an
// unknown type, data past the credit granted, data after a half-close,
// credit past Window, a stream the client never opened: each is a protocol
// error that ends the whole session, naming what was wrong. The host reads
// a hostile guest this way; the package is pure and fuzzed (FuzzReadFrame,
// FuzzSession).
package mux

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Sizes of the framing.
const (
	// HeaderSize is the size of a frame's header.
	HeaderSize = 9
	// MaxPayload bounds one frame's payload.
	MaxPayload = 32 << 10
	// Window is each stream's credit per direction: the most bytes a
	// sender may have sent that the receiver's reader has not consumed.
	Window = 256 << 10
	// MaxStreams bounds the streams open at once on one session.
	MaxStreams = 256
	// Version is the framing's version, sent in the hello frames.
	Version = 1
)

// Type is a frame's type.
type Type uint8

// Frame types.
const (
	// TypeHello opens the session (stream 0, payload: magic and
	// Version): the client sends it first, the server answers it.
	TypeHello Type = 1
	// TypeOpen opens a stream (client to server; no payload).
	TypeOpen Type = 2
	// TypeData carries 1 to MaxPayload bytes of a stream.
	TypeData Type = 3
	// TypeWindow returns credit: payload is a 4-byte increment.
	TypeWindow Type = 4
	// TypeClose half-closes the sender's direction (no payload).
	TypeClose Type = 5
	// TypeReset aborts a stream both ways (no payload).
	TypeReset Type = 6
	// TypeGoAway asks the server to stop serving (client to server,
	// stream 0, no payload): the agent ends the session.
	TypeGoAway Type = 7
)

func (t Type) String() string {
	switch t {
	case TypeHello:
		return "hello"
	case TypeOpen:
		return "open"
	case TypeData:
		return "data"
	case TypeWindow:
		return "window"
	case TypeClose:
		return "close"
	case TypeReset:
		return "reset"
	case TypeGoAway:
		return "goaway"
	}
	return fmt.Sprintf("type %d", uint8(t))
}

// helloMagic starts a hello frame's payload; Version follows it.
const helloMagic = "asbmux"

// Frame is one decoded frame. Payload aliases the reader's buffer until
// the next ReadFrame.
type Frame struct {
	Type    Type
	Stream  uint32
	Payload []byte
}

// ProtocolError is a frame the peer should never have sent; it ends the
// session.
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string { return "mux protocol error: " + e.Msg }

func protoErr(format string, args ...any) error {
	return &ProtocolError{Msg: fmt.Sprintf(format, args...)}
}

// AppendFrame appends f's encoding to b.
func AppendFrame(b []byte, f Frame) []byte {
	var h [HeaderSize]byte
	h[0] = byte(f.Type)
	binary.BigEndian.PutUint32(h[1:5], f.Stream)
	binary.BigEndian.PutUint32(h[5:9], uint32(len(f.Payload)))
	return append(append(b, h[:]...), f.Payload...)
}

// ReadFrame reads one frame from r into buf (which must hold MaxPayload
// bytes) and checks everything a frame says about itself: a known type,
// a length within MaxPayload and what that type allows, the stream id its
// type needs. io.EOF means r ended cleanly between frames.
func ReadFrame(r io.Reader, buf []byte) (Frame, error) {
	var h [HeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, err
	}
	f := Frame{Type: Type(h[0]), Stream: binary.BigEndian.Uint32(h[1:5])}
	n := binary.BigEndian.Uint32(h[5:9])
	if n > MaxPayload {
		return Frame{}, protoErr("%s frame of %d bytes is over the %d-byte limit", f.Type, n, MaxPayload)
	}
	if err := checkHeader(f.Type, f.Stream, n); err != nil {
		return Frame{}, err
	}
	if len(buf) < int(n) {
		return Frame{}, errors.New("mux: read buffer smaller than MaxPayload")
	}
	if _, err := io.ReadFull(r, buf[:n]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	f.Payload = buf[:n]
	if f.Type == TypeHello {
		if string(f.Payload[:len(helloMagic)]) != helloMagic {
			return Frame{}, protoErr("hello frame without the %q magic: the peer does not speak this protocol", helloMagic)
		}
		if v := f.Payload[len(helloMagic)]; v != Version {
			return Frame{}, protoErr("the peer speaks version %d, this side version %d: use an agent and a host of the same release", v, Version)
		}
	}
	if f.Type == TypeWindow && binary.BigEndian.Uint32(f.Payload) == 0 {
		return Frame{}, protoErr("window frame of stream %d grants no credit", f.Stream)
	}
	return f, nil
}

// checkHeader is what a header alone must satisfy.
func checkHeader(t Type, stream, n uint32) error {
	switch t {
	case TypeHello:
		if stream != 0 || n != uint32(len(helloMagic)+1) {
			return protoErr("hello frame on stream %d with %d bytes: want stream 0 and %d bytes", stream, n, len(helloMagic)+1)
		}
	case TypeGoAway:
		if stream != 0 || n != 0 {
			return protoErr("goaway frame on stream %d with %d bytes: want stream 0 and none", stream, n)
		}
	case TypeOpen, TypeClose, TypeReset:
		if stream == 0 || n != 0 {
			return protoErr("%s frame on stream %d with %d bytes: want a stream id above 0 and no payload", t, stream, n)
		}
	case TypeData:
		if stream == 0 || n == 0 {
			return protoErr("data frame on stream %d with %d bytes: want a stream id above 0 and 1 or more bytes", stream, n)
		}
	case TypeWindow:
		if stream == 0 || n != 4 {
			return protoErr("window frame on stream %d with %d bytes: want a stream id above 0 and 4 bytes", stream, n)
		}
	default:
		return protoErr("unknown frame type %d", uint8(t))
	}
	return nil
}

func helloFrame() Frame {
	return Frame{Type: TypeHello, Payload: append([]byte(helloMagic), Version)}
}

func windowFrame(stream, inc uint32) Frame {
	p := make([]byte, 4)
	binary.BigEndian.PutUint32(p, inc)
	return Frame{Type: TypeWindow, Stream: stream, Payload: p}
}
