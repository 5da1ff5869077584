package mux

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Errors of streams and sessions.
var (
	// ErrReset is a stream the peer reset before half-closing it.
	ErrReset = errors.New("mux: stream reset by the peer")
	// ErrClosed is a stream or session closed on this side.
	ErrClosed = errors.New("mux: closed")
	// ErrGoAway is what Accept returns once the client asked the server
	// to stop serving.
	ErrGoAway = errors.New("mux: the client asked to stop serving")
	// ErrTooManyStreams is an Open past MaxStreams.
	ErrTooManyStreams = fmt.Errorf("mux: %d streams are open, the most one session carries", MaxStreams)
)

// Session is one end of a multiplexed connection. All its methods and
// its streams' are safe for concurrent use.
type Session struct {
	conn   io.ReadWriteCloser
	client bool

	wmu  sync.Mutex // one frame at a time on conn
	wbuf []byte

	mu       sync.Mutex
	streams  map[uint32]*Stream
	lastID   uint32 // the highest stream id opened so far
	err      error  // why the session ended; set once
	goaway   bool   // server: the client sent goaway
	hello    bool   // the peer's hello arrived
	accepted chan *Stream
	acceptCh chan struct{} // closed by goaway or the end

	done chan struct{}
}

// Client starts the opening side of a session on conn (the host): it
// sends its hello and reads frames until the session ends. The session
// owns conn and closes it.
func Client(conn io.ReadWriteCloser) *Session {
	s := newSession(conn, true)
	// The hello goes first: the write lock is held until it is sent.
	s.wmu.Lock()
	go func() {
		defer s.wmu.Unlock()
		s.wbuf = AppendFrame(s.wbuf[:0], helloFrame())
		if _, err := s.conn.Write(s.wbuf); err != nil {
			s.fail(fmt.Errorf("mux: send hello: %w", err))
		}
	}()
	go s.readLoop()
	return s
}

// Server starts the accepting side of a session on conn (the agent): it
// answers the client's hello, and Accept yields each stream the client
// opens. The session owns conn and closes it.
func Server(conn io.ReadWriteCloser) *Session {
	s := newSession(conn, false)
	go s.readLoop()
	return s
}

func newSession(conn io.ReadWriteCloser, client bool) *Session {
	return &Session{
		conn: conn, client: client,
		streams:  map[uint32]*Stream{},
		accepted: make(chan *Stream, MaxStreams),
		acceptCh: make(chan struct{}),
		done:     make(chan struct{}),
	}
}

// Done is closed when the session has ended; Err then says why.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is why the session ended: ErrClosed after Close, io.EOF when the
// peer closed the connection, a *ProtocolError for a frame the peer
// should not have sent, or the connection's error. Nil while it runs.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the session and every stream on it, and closes the
// connection.
func (s *Session) Close() error {
	s.fail(ErrClosed)
	return nil
}

// fail ends the session with err (the first error wins).
func (s *Session) fail(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	streams := s.streams
	s.streams = map[uint32]*Stream{}
	if !s.goaway {
		close(s.acceptCh)
	}
	s.mu.Unlock()
	_ = s.conn.Close()
	for _, st := range streams {
		st.mu.Lock()
		if st.err == nil {
			st.err = err
		}
		st.mu.Unlock()
		st.wake()
	}
	close(s.done)
}

func (s *Session) writeFrame(f Frame) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.writeLocked(f)
}

// writeLocked writes f; the caller holds wmu.
func (s *Session) writeLocked(f Frame) error {
	if err := s.Err(); err != nil {
		return err
	}
	s.wbuf = AppendFrame(s.wbuf[:0], f)
	if _, err := s.conn.Write(s.wbuf); err != nil {
		err = fmt.Errorf("mux: write %s frame: %w", f.Type, err)
		s.fail(err)
		return err
	}
	return nil
}

// Open opens a new stream (client only). It fails once MaxStreams are
// open or the session has ended.
func (s *Session) Open(ctx context.Context) (*Stream, error) {
	if !s.client {
		return nil, errors.New("mux: only the client opens streams")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Ids go out in the order they are taken: the server refuses an
	// open that is not above the last.
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return nil, err
	}
	if len(s.streams) >= MaxStreams {
		s.mu.Unlock()
		return nil, ErrTooManyStreams
	}
	if s.lastID == ^uint32(0) {
		s.mu.Unlock()
		return nil, errors.New("mux: stream ids used up: open a new session")
	}
	s.lastID++
	st := newStream(s, s.lastID)
	s.streams[st.id] = st
	s.mu.Unlock()
	if err := s.writeLocked(Frame{Type: TypeOpen, Stream: st.id}); err != nil {
		return nil, err
	}
	return st, nil
}

// Accept waits for the next stream the client opens (server only). It
// returns ErrGoAway after the client's goaway, else the session's error
// once it has ended.
func (s *Session) Accept() (*Stream, error) {
	select {
	case st := <-s.accepted:
		return st, nil
	case <-s.acceptCh:
	}
	select {
	case st := <-s.accepted:
		return st, nil
	default:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.goaway && s.err == nil {
		return nil, ErrGoAway
	}
	return nil, s.err
}

// GoAway asks the server to stop serving (client only); the streams
// already open go on.
func (s *Session) GoAway() error {
	if !s.client {
		return errors.New("mux: only the client sends goaway")
	}
	return s.writeFrame(Frame{Type: TypeGoAway})
}

func (s *Session) readLoop() {
	buf := make([]byte, MaxPayload)
	for {
		f, err := ReadFrame(s.conn, buf)
		if err == nil {
			err = s.handle(f)
		}
		if err != nil {
			s.fail(err)
			return
		}
	}
}

// handle applies one frame the peer sent.
func (s *Session) handle(f Frame) error {
	s.mu.Lock()
	if !s.hello {
		s.mu.Unlock()
		if f.Type != TypeHello {
			return protoErr("%s frame before the hello", f.Type)
		}
		s.mu.Lock()
		s.hello = true
		s.mu.Unlock()
		if !s.client {
			return s.writeFrame(helloFrame())
		}
		return nil
	}
	switch f.Type {
	case TypeHello:
		s.mu.Unlock()
		return protoErr("a second hello")
	case TypeGoAway:
		if s.client {
			s.mu.Unlock()
			return protoErr("goaway from the server")
		}
		if !s.goaway {
			s.goaway = true
			close(s.acceptCh)
		}
		s.mu.Unlock()
		return nil
	case TypeOpen:
		if s.client {
			s.mu.Unlock()
			return protoErr("the server opened stream %d: only the client opens streams", f.Stream)
		}
		if f.Stream <= s.lastID {
			last := s.lastID
			s.mu.Unlock()
			return protoErr("open of stream %d, not above the last one opened (%d)", f.Stream, last)
		}
		s.lastID = f.Stream
		if s.goaway || len(s.streams) >= MaxStreams {
			s.mu.Unlock()
			return s.writeFrame(Frame{Type: TypeReset, Stream: f.Stream})
		}
		st := newStream(s, f.Stream)
		s.streams[f.Stream] = st
		s.mu.Unlock()
		s.accepted <- st // room for MaxStreams, and no more are open
		return nil
	}
	st, ok := s.streams[f.Stream]
	if !ok {
		last := s.lastID
		s.mu.Unlock()
		if f.Stream > last {
			return protoErr("%s frame for stream %d, which was never opened", f.Type, f.Stream)
		}
		return nil // a stream closed here: the frame crossed our close
	}
	s.mu.Unlock()
	return st.handle(f)
}

// forget drops a stream closed on this side.
func (s *Session) forget(id uint32) {
	s.mu.Lock()
	delete(s.streams, id)
	s.mu.Unlock()
}

// Stream is one stream of a session: an io.ReadWriteCloser with a
// half-close.
type Stream struct {
	s  *Session
	id uint32

	mu       sync.Mutex
	rbuf     []byte // received, unread: rbuf[roff:]
	roff     int
	recvLeft uint32 // credit the peer still has
	consumed uint32 // read since the last window frame
	rfin     bool   // the peer half-closed
	credit   uint32 // what this side may still send
	wfin     bool   // this side half-closed
	closed   bool   // Close was called
	err      error  // reset or the session's end

	rwake chan struct{}
	wwake chan struct{}
}

func newStream(s *Session, id uint32) *Stream {
	return &Stream{s: s, id: id, recvLeft: Window, credit: Window,
		rwake: make(chan struct{}, 1), wwake: make(chan struct{}, 1)}
}

// ID is the stream's id.
func (st *Stream) ID() uint32 { return st.id }

func (st *Stream) wake() {
	for _, c := range []chan struct{}{st.rwake, st.wwake} {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// handle applies a data, window, close or reset frame.
func (st *Stream) handle(f Frame) error {
	st.mu.Lock()
	defer st.wake()
	defer st.mu.Unlock()
	switch f.Type {
	case TypeData:
		n := uint32(len(f.Payload))
		if st.rfin {
			return protoErr("data on stream %d after its close", st.id)
		}
		if n > st.recvLeft {
			return protoErr("stream %d sent %d bytes with %d bytes of credit left", st.id, n, st.recvLeft)
		}
		st.recvLeft -= n
		if st.err != nil {
			return nil // reset: nobody reads it
		}
		if st.roff > 0 && st.roff >= len(st.rbuf)/2 {
			st.rbuf = append(st.rbuf[:0], st.rbuf[st.roff:]...)
			st.roff = 0
		}
		st.rbuf = append(st.rbuf, f.Payload...)
	case TypeWindow:
		inc := binary.BigEndian.Uint32(f.Payload)
		if uint64(st.credit)+uint64(inc) > Window {
			return protoErr("window frame of stream %d grants %d bytes on top of %d: over the %d-byte window", st.id, inc, st.credit, Window)
		}
		st.credit += inc
	case TypeClose:
		if st.rfin {
			return protoErr("a second close of stream %d", st.id)
		}
		st.rfin = true
	case TypeReset:
		if st.err == nil {
			st.err = ErrReset
		}
	}
	return nil
}

// Read reads what the peer sent. After the peer's half-close it returns
// io.EOF once everything is read; after a reset, ErrReset.
func (st *Stream) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		st.mu.Lock()
		if st.closed {
			st.mu.Unlock()
			return 0, ErrClosed
		}
		if st.roff < len(st.rbuf) {
			n := copy(p, st.rbuf[st.roff:])
			st.roff += n
			if st.roff == len(st.rbuf) {
				st.rbuf, st.roff = st.rbuf[:0], 0
			}
			var inc uint32
			st.consumed += uint32(n)
			if st.consumed >= Window/2 && !st.rfin && st.err == nil {
				inc, st.consumed = st.consumed, 0
				st.recvLeft += inc
			}
			st.mu.Unlock()
			if inc > 0 {
				_ = st.s.writeFrame(windowFrame(st.id, inc))
			}
			return n, nil
		}
		switch {
		case st.rfin:
			st.mu.Unlock()
			return 0, io.EOF
		case st.err != nil:
			err := st.err
			st.mu.Unlock()
			return 0, err
		}
		st.mu.Unlock()
		<-st.rwake
	}
}

// Write sends p, waiting for credit as the peer's reader consumes.
func (st *Stream) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		st.mu.Lock()
		switch {
		case st.closed:
			st.mu.Unlock()
			return written, ErrClosed
		case st.wfin:
			st.mu.Unlock()
			return written, errors.New("mux: write after CloseWrite")
		case st.err != nil:
			err := st.err
			st.mu.Unlock()
			return written, err
		}
		n := min(uint32(len(p)), st.credit, MaxPayload)
		if n == 0 {
			st.mu.Unlock()
			<-st.wwake
			continue
		}
		st.credit -= n
		st.mu.Unlock()
		if err := st.s.writeFrame(Frame{Type: TypeData, Stream: st.id, Payload: p[:n]}); err != nil {
			return written, err
		}
		written += int(n)
		p = p[n:]
	}
	return written, nil
}

// CloseWrite half-closes the stream: the peer reads EOF after what was
// written; this side can still read.
func (st *Stream) CloseWrite() error {
	st.mu.Lock()
	if st.closed || st.wfin {
		st.mu.Unlock()
		return nil
	}
	st.wfin = true
	err := st.err
	st.mu.Unlock()
	if err != nil {
		return err
	}
	return st.s.writeFrame(Frame{Type: TypeClose, Stream: st.id})
}

// Close ends the stream on this side: it half-closes it (the peer reads
// what was written, then EOF) and, unless the peer had half-closed too,
// resets it, so the peer's writes fail. Blocked reads and writes return
// ErrClosed. It does not wait for the frames to be written.
func (st *Stream) Close() error {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return nil
	}
	st.closed = true
	fin := !st.wfin && st.err == nil
	reset := !st.rfin && st.err == nil
	st.wfin = true
	st.rbuf = nil
	st.mu.Unlock()
	st.wake()
	st.s.forget(st.id)
	if !fin && !reset {
		return nil
	}
	// The frames go out behind whatever holds the connection: a peer
	// that stopped reading must not hold up the close (the session's
	// own Close ends that wait).
	go func() {
		if fin && st.s.writeFrame(Frame{Type: TypeClose, Stream: st.id}) != nil {
			return
		}
		if reset {
			_ = st.s.writeFrame(Frame{Type: TypeReset, Stream: st.id})
		}
	}()
	return nil
}
