package dns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
)

const (
	// DefaultMaxLogged is how many queries a step's log keeps when
	// Server.MaxLogged is 0.
	DefaultMaxLogged = 10000

	// MaxTCPConns is how many TCP connections the server serves at once;
	// a connection beyond it is closed at once.
	MaxTCPConns = 64
	// MaxTCPMessage bounds one query over TCP (a query is a few dozen
	// bytes; EDNS options add a few more). A longer one ends the connection.
	MaxTCPMessage = 4096
	// TCPIdleTimeout is how long a TCP connection may take to send the
	// next query, and to take its answer.
	TCPIdleTimeout = 5 * time.Second
	// TCPMaxLifetime bounds a TCP connection however busy it is.
	TCPMaxLifetime = 30 * time.Second

	// udpBuffer holds the largest UDP payload, so that no datagram is
	// silently cut.
	udpBuffer = 65535
)

// Server answers a step's DNS queries from its rules alone.
//
// Set the exported fields before Serve and do not change them after.
type Server struct {
	// Step names the step in log lines and errors.
	Step  string
	Rules *egress.Rules
	// Live, when set, holds the rules instead of Rules: they can change
	// while the server runs, and each query is answered by those in
	// force (egress.Live).
	Live   *egress.Live
	Mapper *egress.Mapper
	// Log receives every query, one call each (nil: no log). It is called
	// from one goroutine at a time, while the query waits for its answer:
	// it should append to a buffer or file, not block.
	Log func(egress.Query)
	// MaxLogged caps the queries logged (0 or less: DefaultMaxLogged).
	// Beyond it queries are counted, and Close logs one last line with
	// Suppressed set to how many were not logged.
	MaxLogged int

	mu      sync.Mutex
	started bool
	closed  bool
	done    chan struct{} // closed by shutdown
	pc      net.PacketConn
	l       net.Listener
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup // serve loops and TCP connections

	closeOnce sync.Once
	closeErr  error

	logMu      sync.Mutex
	logged     int
	suppressed int
	finalOnce  sync.Once
}

// Serve answers queries on pc (UDP) and l (TCP), either of which may be
// nil, until Close is called; it then returns nil once every answer in
// flight is done. The server owns the sockets from here on and closes
// them. An error reading a socket (other than its closing) stops both and
// is returned; call Close afterwards all the same.
func (s *Server) Serve(pc net.PacketConn, l net.Listener) error {
	closeBoth := func() {
		if pc != nil {
			pc.Close()
		}
		if l != nil {
			l.Close()
		}
	}
	if pc == nil && l == nil {
		return fmt.Errorf("dns server for step %q: no socket to serve on; pass the UDP and TCP sockets created in the step's network namespace", s.Step)
	}
	if (s.Rules == nil && s.Live == nil) || s.Mapper == nil {
		closeBoth()
		return fmt.Errorf("dns server for step %q: Rules and Mapper must be set before Serve (egress.NewRules, egress.NewMapper)", s.Step)
	}
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		closeBoth()
		return fmt.Errorf("dns server for step %q: Serve called twice; a Server serves one set of sockets", s.Step)
	}
	s.started = true
	if s.closed {
		s.mu.Unlock()
		closeBoth()
		return nil
	}
	if s.done == nil {
		s.done = make(chan struct{})
	}
	s.pc, s.l = pc, l
	s.conns = map[net.Conn]struct{}{}
	errc := make(chan error, 2)
	n := 0
	if pc != nil {
		n++
		s.wg.Add(1)
		go func() { defer s.wg.Done(); errc <- s.serveUDP(pc) }()
	}
	if l != nil {
		n++
		s.wg.Add(1)
		go func() { defer s.wg.Done(); errc <- s.serveTCP(l) }()
	}
	s.mu.Unlock()

	var first error
	for range n {
		if err := <-errc; err != nil && first == nil {
			first = err
			s.shutdown()
		}
	}
	s.wg.Wait()
	if first != nil {
		s.logFinal()
	}
	return first
}

// Close stops the server: it closes both sockets and every TCP connection,
// waits for the answers in flight, and logs the count of queries not
// logged, if any. It may be called more than once, and before Serve.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = s.shutdown()
		s.wg.Wait()
		s.logFinal()
	})
	return s.closeErr
}

// shutdown closes what the server holds, once; later calls do nothing.
func (s *Server) shutdown() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.done == nil {
		s.done = make(chan struct{})
	}
	close(s.done)
	var errs []error
	if s.pc != nil {
		if err := s.pc.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("dns server for step %q: close UDP socket: %w", s.Step, err))
		}
	}
	if s.l != nil {
		if err := s.l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("dns server for step %q: close TCP listener: %w", s.Step, err))
		}
	}
	for c := range s.conns {
		c.Close()
	}
	return errors.Join(errs...)
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Server) serveUDP(pc net.PacketConn) error {
	buf := make([]byte, udpBuffer)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			if s.isClosed() {
				return nil
			}
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				continue
			}
			return fmt.Errorf("dns server for step %q: read UDP on %s: %w", s.Step, pc.LocalAddr(), err)
		}
		// Answers are local and cheap, so one goroutine answers them all
		// in turn: a flood costs one core at most, not a goroutine each.
		if resp := s.answer(buf[:n], true); resp != nil {
			// A failed write concerns one client only (it may have gone).
			pc.WriteTo(resp, addr)
		}
	}
}

func (s *Server) serveTCP(l net.Listener) error {
	slots := make(chan struct{}, MaxTCPConns)
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if s.isClosed() {
				return nil
			}
			if !temporary(err) {
				return fmt.Errorf("dns server for step %q: accept TCP on %s: %w", s.Step, l.Addr(), err)
			}
			// Out of descriptors or an aborted handshake: wait, then go on.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(delay):
			case <-s.done:
				return nil
			}
			continue
		}
		delay = 0
		select {
		case slots <- struct{}{}:
		default:
			c.Close()
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
				<-slots
				s.wg.Done()
			}()
			s.serveConn(c)
		}()
	}
}

// temporary reports whether an Accept error passes (the listener stays
// good).
func temporary(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO, syscall.EPERM} {
		if errors.Is(err, e) {
			return true
		}
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return true
	}
	return false
}

// serveConn answers the queries on one TCP connection (RFC 1035 4.2.2:
// each message follows its two-byte length) until the client closes it,
// is idle for TCPIdleTimeout, sends something that is not a query, or the
// connection is TCPMaxLifetime old.
func (s *Server) serveConn(c net.Conn) {
	end := time.Now().Add(TCPMaxLifetime)
	var head [2]byte
	buf := make([]byte, MaxTCPMessage)
	for {
		deadline := time.Now().Add(TCPIdleTimeout)
		if deadline.After(end) {
			deadline = end
		}
		if c.SetDeadline(deadline) != nil {
			return
		}
		if _, err := io.ReadFull(c, head[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(head[:]))
		if n > MaxTCPMessage {
			s.log(egress.Query{Type: "dns", Time: time.Now().UTC(), Step: s.Step,
				Reason: fmt.Sprintf("closed a TCP connection that sent a %d-byte message: a query is at most %d bytes", n, MaxTCPMessage)})
			return
		}
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return
		}
		resp := s.answer(buf[:n], false)
		if resp == nil {
			return
		}
		out := make([]byte, 2+len(resp))
		binary.BigEndian.PutUint16(out, uint16(len(resp)))
		copy(out[2:], resp)
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

func (s *Server) maxLogged() int {
	if s.MaxLogged <= 0 {
		return DefaultMaxLogged
	}
	return s.MaxLogged
}

// log passes q to Log, or counts it once MaxLogged lines are written.
func (s *Server) log(q egress.Query) {
	if s.Log == nil {
		return
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	if s.logged >= s.maxLogged() {
		s.suppressed++
		return
	}
	s.logged++
	s.Log(q)
}

// logFinal writes the one line that counts the queries not logged.
func (s *Server) logFinal() {
	s.finalOnce.Do(func() {
		if s.Log == nil {
			return
		}
		s.logMu.Lock()
		defer s.logMu.Unlock()
		if s.suppressed == 0 {
			return
		}
		s.Log(egress.Query{
			Type:       "dns",
			Time:       time.Now().UTC(),
			Step:       s.Step,
			Suppressed: s.suppressed,
			Reason:     fmt.Sprintf("%d more queries were answered but not logged: the log keeps the first %d queries of a step", s.suppressed, s.maxLogged()),
		})
	})
}

// rules are the rules in force.
func (s *Server) rules() *egress.Rules {
	if s.Live != nil {
		return s.Live.Load()
	}
	return s.Rules
}
