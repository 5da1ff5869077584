package server

import (
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// limitListener bounds the connections l's server holds open at once to
// MaxConnections. A connection over it is accepted, answered 429 with a
// JSON error and closed at once: a flood of connections (authenticated or
// not) costs the server a descriptor only for that moment, and a client
// is told why instead of hanging in the kernel's backlog.
func (s *Server) limitListener(l net.Listener) net.Listener {
	return &limitedListener{Listener: l, slots: make(chan struct{}, s.o.MaxConnections), logf: s.o.Logf}
}

type limitedListener struct {
	net.Listener
	slots chan struct{}
	logf  func(string, ...any)

	mu      sync.Mutex
	refused int       // since the last log line
	logged  time.Time // when that was
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &limitedConn{Conn: c, release: func() { <-l.slots }}, nil
		default:
			l.refuse(c)
		}
	}
}

// refuse answers c that the server is full and closes it. The answer is a
// few hundred bytes into a new connection's empty send buffer, so the
// write does not block the accept loop (and a write deadline bounds it if
// it would).
func (l *limitedListener) refuse(c net.Conn) {
	body, _ := json.Marshal(ErrorBody{Error: sandboxes.Error{Code: sandboxes.CodeLimit,
		Message: fmt.Sprintf("this server holds %d connections, the most it takes at once (serve --max-connections): close idle ones or retry shortly", cap(l.slots))}})
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	fmt.Fprintf(c, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\n\r\n%s\n", len(body)+1, body)
	c.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refused++
	if time.Since(l.logged) >= time.Minute {
		l.logf("refused %d connections over --max-connections (%d) on %s", l.refused, cap(l.slots), l.Addr())
		l.refused, l.logged = 0, time.Now()
	}
}

// limitedConn gives its slot back when it is closed (once).
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite half-closes a TCP or unix connection, which the HTTP server
// does before closing one whose request body it did not read, so that the
// client reads the answer instead of a reset.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
