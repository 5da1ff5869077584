package mux

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pair is a client and a server session on the two ends of conns.
func pair(t testing.TB, c1, c2 io.ReadWriteCloser) (*Session, *Session) {
	t.Helper()
	cl, sv := Client(c1), Server(c2)
	t.Cleanup(func() { cl.Close(); sv.Close() })
	return cl, sv
}

// socketpair is a connected pair of unix stream sockets, as the host's
// side of qemu's chardev is.
func socketpair(t testing.TB) (io.ReadWriteCloser, io.ReadWriteCloser) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]io.ReadWriteCloser
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	return conns[0], conns[1]
}

// echo serves every accepted stream by copying it back, then half-closing.
func echo(sv *Session) {
	for {
		st, err := sv.Accept()
		if err != nil {
			return
		}
		go func() {
			defer st.Close()
			if _, err := io.Copy(st, st); err != nil {
				return
			}
			st.CloseWrite()
		}()
	}
}

func TestManyConcurrentStreams(t *testing.T) {
	for name, conns := range map[string]func(testing.TB) (io.ReadWriteCloser, io.ReadWriteCloser){
		"pipe":       func(testing.TB) (io.ReadWriteCloser, io.ReadWriteCloser) { return net.Pipe() },
		"socketpair": socketpair,
	} {
		t.Run(name, func(t *testing.T) {
			a, b := conns(t)
			cl, sv := pair(t, a, b)
			go echo(sv)
			const n = 64
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					size := rand.Intn(3*Window) + 1
					if i%8 == 0 {
						size = 1
					}
					want := make([]byte, size)
					rand.Read(want)
					st, err := cl.Open(context.Background())
					if err != nil {
						errs <- err
						return
					}
					defer st.Close()
					go func() {
						st.Write(want)
						st.CloseWrite()
					}()
					got, err := io.ReadAll(st)
					if err != nil {
						errs <- fmt.Errorf("stream %d: %w", st.ID(), err)
						return
					}
					if !bytes.Equal(got, want) {
						errs <- fmt.Errorf("stream %d: got %d bytes back, sent %d (or different ones)", st.ID(), len(got), len(want))
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			cl.mu.Lock()
			left := len(cl.streams)
			cl.mu.Unlock()
			if left != 0 {
				t.Errorf("%d streams left open on the client after every one was closed", left)
			}
		})
	}
}

func TestHalfClose(t *testing.T) {
	a, b := net.Pipe()
	cl, sv := pair(t, a, b)
	st, err := cl.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := st.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte("more")); err == nil {
		t.Error("write after CloseWrite worked")
	}
	ss, err := sv.Accept()
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(ss)
	if err != nil || string(got) != "request" {
		t.Fatalf("server read %q, %v; want the request then EOF", got, err)
	}
	// The server still writes after the client's half-close.
	if _, err := ss.Write([]byte("answer")); err != nil {
		t.Fatal(err)
	}
	ss.Close()
	got, err = io.ReadAll(st)
	if err != nil || string(got) != "answer" {
		t.Fatalf("client read %q, %v; want the answer then EOF", got, err)
	}
	st.Close()
}

// A stream whose reader stalls holds at most Window bytes at the
// receiver, its writer waits, and other streams go on.
func TestStalledReaderDoesNotStallOthers(t *testing.T) {
	a, b := socketpair(t)
	cl, sv := pair(t, a, b)
	stalled, err := cl.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ss, err := sv.Accept()
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan int, 1)
	go func() {
		n, _ := ss.Write(make([]byte, 4*Window))
		wrote <- n
	}()
	// Other streams round-trip while the first one's writer waits.
	go echo(sv)
	for i := range 20 {
		st, err := cl.Open(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprintf("message %d", i)
		st.Write([]byte(msg))
		st.CloseWrite()
		got, err := io.ReadAll(st)
		if err != nil || string(got) != msg {
			t.Fatalf("stream %d: %q, %v", st.ID(), got, err)
		}
		st.Close()
	}
	select {
	case n := <-wrote:
		t.Fatalf("the writer to a stalled reader finished (%d bytes) with nobody reading", n)
	default:
	}
	stalled.mu.Lock()
	buffered := len(stalled.rbuf) - stalled.roff
	stalled.mu.Unlock()
	if buffered > Window {
		t.Errorf("the stalled stream buffers %d bytes, over its %d-byte window", buffered, Window)
	}
	// Reading it lets the writer finish.
	n, err := io.ReadFull(stalled, make([]byte, 4*Window))
	if err != nil {
		t.Fatalf("read the stalled stream: %d bytes, %v", n, err)
	}
	if n := <-wrote; n != 4*Window {
		t.Errorf("writer wrote %d bytes, want %d", n, 4*Window)
	}
}

func TestCloseResetsThePeer(t *testing.T) {
	a, b := net.Pipe()
	cl, sv := pair(t, a, b)
	st, err := cl.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st.Write([]byte("last words"))
	ss, err := sv.Accept()
	if err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	go func() {
		_, err := ss.Write(make([]byte, 2*Window)) // more than the credit: waits
		blocked <- err
	}()
	time.Sleep(10 * time.Millisecond)
	st.Close()
	// What was written before the close is still read, then EOF.
	got, err := io.ReadAll(ss)
	if err != nil || string(got) != "last words" {
		t.Errorf("server read %q, %v; want the last words then EOF", got, err)
	}
	if err := <-blocked; !errors.Is(err, ErrReset) {
		t.Errorf("server's write to a closed stream: %v, want ErrReset", err)
	}
	if _, err := st.Read(make([]byte, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("read after Close: %v, want ErrClosed", err)
	}
}

func TestGoAwayAndSessionEnd(t *testing.T) {
	a, b := net.Pipe()
	cl, sv := pair(t, a, b)
	st, err := cl.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.GoAway(); err != nil {
		t.Fatal(err)
	}
	if _, err := sv.Accept(); err != nil {
		t.Fatalf("the stream opened before goaway: %v", err)
	}
	if _, err := sv.Accept(); !errors.Is(err, ErrGoAway) {
		t.Fatalf("accept after goaway: %v, want ErrGoAway", err)
	}
	// A stream opened after goaway is reset.
	late, err := cl.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := late.Read(make([]byte, 1)); !errors.Is(err, ErrReset) {
		t.Errorf("stream opened after goaway: read %v, want ErrReset", err)
	}
	// Ending the session ends its streams.
	sv.Close()
	<-cl.Done()
	if _, err := st.Read(make([]byte, 1)); err == nil {
		t.Error("read on a stream of an ended session worked")
	}
	if _, err := cl.Open(context.Background()); err == nil {
		t.Error("open on an ended session worked")
	}
}

func TestOpenBound(t *testing.T) {
	a, b := net.Pipe()
	cl, sv := pair(t, a, b)
	go func() {
		for {
			if _, err := sv.Accept(); err != nil {
				return
			}
		}
	}()
	var open []*Stream
	for range MaxStreams {
		st, err := cl.Open(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, st)
	}
	if _, err := cl.Open(context.Background()); !errors.Is(err, ErrTooManyStreams) {
		t.Fatalf("open past MaxStreams: %v", err)
	}
	open[0].Close()
	if _, err := cl.Open(context.Background()); err != nil {
		t.Fatalf("open after a close: %v", err)
	}
}

// raw is a peer that writes frames by hand.
func raw(frames ...Frame) []byte {
	var b []byte
	for _, f := range frames {
		b = AppendFrame(b, f)
	}
	return b
}

// header is a frame header alone, which may claim any length.
func header(t Type, stream, n uint32) []byte {
	h := make([]byte, HeaderSize)
	h[0] = byte(t)
	binary.BigEndian.PutUint32(h[1:5], stream)
	binary.BigEndian.PutUint32(h[5:9], n)
	return h
}

// A peer that lies ends the session with a protocol error that says how.
func TestLyingPeer(t *testing.T) {
	hello := raw(helloFrame())
	data := func(id uint32, n int) Frame { return Frame{Type: TypeData, Stream: id, Payload: make([]byte, n)} }
	for _, c := range []struct {
		name   string
		client bool // the lying peer talks to a client (it is the guest)
		open   int  // streams the client opens first
		send   []byte
		want   string
	}{
		{"no hello", true, 0, raw(data(1, 1)), "before the hello"},
		{"bad magic", true, 0, raw(Frame{Type: TypeHello, Payload: []byte("asbmuX\x01")}), "magic"},
		{"other version", true, 0, raw(Frame{Type: TypeHello, Payload: []byte("asbmux\x02")}), "version 2"},
		{"huge length", true, 1, append(hello, header(TypeData, 1, 1<<31)...), "over the 32768-byte limit"},
		{"unknown type", true, 1, append(hello, header(99, 1, 0)...), "unknown frame type 99"},
		{"server opens", true, 0, append(hello, raw(Frame{Type: TypeOpen, Stream: 2})...), "only the client opens"},
		{"never opened", true, 1, append(hello, raw(data(7, 1))...), "never opened"},
		{"past the window", true, 1, append(hello, raw(data(1, MaxPayload), data(1, MaxPayload), data(1, MaxPayload), data(1, MaxPayload),
			data(1, MaxPayload), data(1, MaxPayload), data(1, MaxPayload), data(1, MaxPayload), data(1, 1))...), "credit left"},
		{"window overflow", true, 1, append(hello, raw(windowFrame(1, 1))...), "over the 262144-byte window"},
		{"zero window", true, 1, append(hello, raw(windowFrame(1, 0))...), "grants no credit"},
		{"data after close", true, 1, append(hello, raw(Frame{Type: TypeClose, Stream: 1}, data(1, 1))...), "after its close"},
		{"second close", true, 1, append(hello, raw(Frame{Type: TypeClose, Stream: 1}, Frame{Type: TypeClose, Stream: 1})...), "a second close"},
		{"empty data", true, 1, append(hello, header(TypeData, 1, 0)...), "1 or more bytes"},
		{"goaway from server", true, 0, append(hello, raw(Frame{Type: TypeGoAway})...), "goaway from the server"},
		{"second hello", true, 0, append(hello, hello...), "a second hello"},
		{"open not above", false, 0, append(hello, raw(Frame{Type: TypeOpen, Stream: 5}, Frame{Type: TypeOpen, Stream: 5})...), "not above"},
		{"open on stream 0", false, 0, append(hello, header(TypeOpen, 0, 0)...), "above 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer b.Close()
			var s *Session
			if c.client {
				s = Client(a)
			} else {
				s = Server(a)
			}
			defer s.Close()
			go io.Copy(io.Discard, b)
			for range c.open {
				if _, err := s.Open(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			go b.Write(c.send)
			select {
			case <-s.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the session did not end on a lying peer")
			}
			var pe *ProtocolError
			if err := s.Err(); !errors.As(err, &pe) || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
				t.Errorf("session ended with %v, want a protocol error saying %q", err, c.want)
			}
		})
	}
}

// Frames for a stream closed on this side are dropped, not errors: they
// crossed the close.
func TestFramesAfterLocalCloseAreDropped(t *testing.T) {
	a, b := net.Pipe()
	cl := Client(a)
	defer cl.Close()
	go io.Copy(io.Discard, b)
	b.Write(raw(helloFrame()))
	st, err := cl.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	b.Write(raw(Frame{Type: TypeData, Stream: 1, Payload: []byte("late")}, Frame{Type: TypeReset, Stream: 1}))
	st2, err := cl.Open(context.Background())
	if err != nil {
		t.Fatalf("the session ended on frames of a closed stream: %v", err)
	}
	b.Write(raw(Frame{Type: TypeData, Stream: st2.ID(), Payload: []byte("ok")}))
	got := make([]byte, 2)
	if _, err := io.ReadFull(st2, got); err != nil || string(got) != "ok" {
		t.Errorf("read %q, %v", got, err)
	}
}

func TestFrameRoundTrip(t *testing.T) {
	frames := []Frame{helloFrame(), {Type: TypeOpen, Stream: 3}, {Type: TypeData, Stream: 3, Payload: []byte("x")},
		windowFrame(3, 7), {Type: TypeClose, Stream: 3}, {Type: TypeReset, Stream: 3}, {Type: TypeGoAway}}
	r := bytes.NewReader(raw(frames...))
	buf := make([]byte, MaxPayload)
	for _, want := range frames {
		got, err := ReadFrame(r, buf)
		if err != nil {
			t.Fatalf("%s: %v", want.Type, err)
		}
		if got.Type != want.Type || got.Stream != want.Stream || !bytes.Equal(got.Payload, want.Payload) {
			t.Errorf("got %+v, want %+v", got, want)
		}
	}
	if _, err := ReadFrame(r, buf); err != io.EOF {
		t.Errorf("at the end: %v, want io.EOF", err)
	}
	// Cut short inside a frame.
	b := raw(Frame{Type: TypeData, Stream: 1, Payload: []byte("abc")})
	if _, err := ReadFrame(bytes.NewReader(b[:len(b)-1]), buf); err != io.ErrUnexpectedEOF {
		t.Errorf("cut payload: %v, want io.ErrUnexpectedEOF", err)
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(raw(helloFrame(), Frame{Type: TypeOpen, Stream: 1}, Frame{Type: TypeData, Stream: 1, Payload: []byte("hi")}))
	f.Add(header(TypeData, 1, 1<<31))
	f.Add(raw(windowFrame(1, 0)))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		buf := make([]byte, MaxPayload)
		for {
			fr, err := ReadFrame(r, buf)
			if err != nil {
				return
			}
			if len(fr.Payload) > MaxPayload {
				t.Fatalf("payload of %d bytes", len(fr.Payload))
			}
			// What decodes encodes back to the same bytes.
			if enc := AppendFrame(nil, fr); len(enc) != HeaderSize+len(fr.Payload) {
				t.Fatalf("re-encoded to %d bytes", len(enc))
			}
		}
	})
}

// fuzzConn feeds a session the fuzzer's bytes and discards what it writes.
type fuzzConn struct{ r io.Reader }

func (c fuzzConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c fuzzConn) Write(p []byte) (int, error) { return len(p), nil }
func (c fuzzConn) Close() error                { return nil }

// FuzzSession: whatever a hostile peer sends, a session ends (with an
// error) when the bytes run out, without a panic or a hang.
func FuzzSession(f *testing.F) {
	f.Add(raw(helloFrame(), Frame{Type: TypeData, Stream: 1, Payload: []byte("x")}, Frame{Type: TypeClose, Stream: 1}), false)
	f.Add(raw(helloFrame(), Frame{Type: TypeOpen, Stream: 1}, Frame{Type: TypeData, Stream: 1, Payload: []byte("x")}, Frame{Type: TypeGoAway}), true)
	f.Fuzz(func(t *testing.T, b []byte, server bool) {
		var s *Session
		if server {
			s = Server(fuzzConn{bytes.NewReader(b)})
			go func() {
				for {
					if _, err := s.Accept(); err != nil {
						return
					}
				}
			}()
		} else {
			// The client opens two streams before the peer's bytes are read.
			pr, pw := io.Pipe()
			s = Client(fuzzConn{pr})
			for range 2 {
				if _, err := s.Open(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			go func() { pw.Write(b); pw.Close() }()
		}
		select {
		case <-s.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the session did not end when its input did")
		}
		if s.Err() == nil {
			t.Fatal("an ended session without an error")
		}
	})
}

// A peer that stops reading holds the connection's writes, but not a
// stream's Close, and the session's Close ends the blocked write.
func TestCloseDoesNotWaitForAStuckPeer(t *testing.T) {
	a, b := net.Pipe()
	cl := Client(a)
	buf := make([]byte, MaxPayload)
	if _, err := ReadFrame(b, buf); err != nil { // the hello
		t.Fatal(err)
	}
	go b.Write(raw(helloFrame()))
	opened := make(chan *Stream, 1)
	go func() {
		st, err := cl.Open(context.Background())
		if err != nil {
			t.Error(err)
		}
		opened <- st
	}()
	if _, err := ReadFrame(b, buf); err != nil { // the open; then b reads no more
		t.Fatal(err)
	}
	st := <-opened
	wrote := make(chan error, 1)
	go func() { _, err := st.Write([]byte("stuck")); wrote <- err }()
	time.Sleep(20 * time.Millisecond)
	closed := make(chan struct{})
	go func() { st.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a peer that does not read")
	}
	cl.Close()
	select {
	case <-wrote:
	case <-time.After(5 * time.Second):
		t.Fatal("the session's Close did not end a write blocked on the peer")
	}
}

// BenchmarkStream is one stream's throughput over a socketpair (the
// host's side of the channel is a unix socket), 1 MiB per operation.
func BenchmarkStream(b *testing.B) {
	a, c := socketpair(b)
	cl, sv := pair(b, a, c)
	go func() {
		st, err := sv.Accept()
		if err != nil {
			return
		}
		io.Copy(io.Discard, st)
	}()
	st, err := cl.Open(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if _, err := st.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenEcho is what an exec adds on the channel: open a stream,
// one small message each way, close.
func BenchmarkOpenEcho(b *testing.B) {
	a, c := socketpair(b)
	cl, sv := pair(b, a, c)
	go echo(sv)
	msg := []byte(`{"op":"exec","command":["true"]}` + "\n")
	got := make([]byte, len(msg))
	for b.Loop() {
		st, err := cl.Open(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		st.Write(msg)
		if _, err := io.ReadFull(st, got); err != nil {
			b.Fatal(err)
		}
		st.Close()
	}
}
