package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/egress/hostaddr"
	"github.com/agentsandbox/agentsandbox/netns"
)

// Config is one step's proxy.
type Config struct {
	Step  string
	Rules *egress.Rules
	// Live, when set, holds the rules instead of Rules: they can change
	// while the proxy runs, and each connection is judged by those in
	// force when it is (egress.Live).
	Live *egress.Live
	// Mapper names the step resolver's private addresses; nil: none are
	// known, and a connection to one is denied.
	Mapper *egress.Mapper
	// Resolve looks a name up on the host at dial time; nil:
	// net.DefaultResolver.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Dial opens the upstream connection; it is only ever given an
	// address:port literal that Rules.CheckUpstream accepted. nil: a
	// net.Dialer.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// HostAddrs are the own addresses of the host Dial dials from, which
	// CheckUpstream refuses unless the operator opens them; nil:
	// hostaddr.Default, this process's network namespace's.
	HostAddrs egress.HostAddrs
	// OriginalDst is where a redirected connection was going; nil:
	// netns.OriginalDst (SO_ORIGINAL_DST, IP6T_SO_ORIGINAL_DST).
	OriginalDst func(c net.Conn) (netip.AddrPort, error)
	// Bandwidth is bytes per second, shared by all the step's
	// connections, in each direction separately; 0 is unlimited.
	Bandwidth int64
	// Log gets one audit line per connection when it ends. Calls are
	// made one at a time; Log must not call Close (Close waits for it).
	Log func(egress.Conn)
	// PeekTimeout is how long to wait for a client's first bytes before
	// the connection is taken for a server-first one (default 500ms);
	// HeadTimeout is how long, from its first byte, a client may take
	// to send the whole of its ClientHello or request head (default 5s;
	// one that does not is refused); DialTimeout bounds resolving and
	// dialling upstream (default 10s); IdleTimeout ends a connection on
	// which nothing moved either way for that long (default 5m).
	PeekTimeout, HeadTimeout, DialTimeout, IdleTimeout time.Duration
	// MaxConns bounds concurrent connections (default 1024); beyond it a
	// new connection is refused and logged.
	MaxConns int
}

// Defaults for zero Config fields.
const (
	DefaultPeekTimeout = 500 * time.Millisecond
	DefaultHeadTimeout = 5 * time.Second
	DefaultDialTimeout = 10 * time.Second
	DefaultIdleTimeout = 5 * time.Minute
	DefaultMaxConns    = 1024
	// headTimeout bounds how long a client of the endpoint may take to
	// send its request head.
	headTimeout = 10 * time.Second
)

// Stats are a proxy's totals so far.
type Stats struct {
	Allowed  int64 // connections allowed (Failed among them)
	Denied   int64 // connections denied or refused
	Failed   int64 // allowed, but the upstream dial failed
	BytesOut int64 // job → upstream
	BytesIn  int64 // upstream → job
}

// Proxy is one step's egress proxy.
type Proxy struct {
	c        Config
	ctx      context.Context
	cancel   context.CancelFunc
	out, in  *bucket // job → upstream, upstream → job; nil: unlimited
	logMu    sync.Mutex
	mu       sync.Mutex
	closed   bool
	lns      map[net.Listener]struct{}
	sessions map[*session]struct{}
	wg       sync.WaitGroup

	allowed, denied, failed, bytesOut, bytesIn atomic.Int64
}

// New returns a proxy for c. It listens on nothing until Serve* is called.
func New(c Config) *Proxy {
	if c.Rules == nil {
		c.Rules = &egress.Rules{}
	}
	if c.Live == nil {
		c.Live = egress.NewLive(c.Rules)
	}
	if c.Resolve == nil {
		c.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if c.Dial == nil {
		d := &net.Dialer{}
		c.Dial = d.DialContext
	}
	if c.HostAddrs == nil {
		c.HostAddrs = hostaddr.Default
	}
	if c.OriginalDst == nil {
		c.OriginalDst = netns.OriginalDst
	}
	if c.Log == nil {
		c.Log = func(egress.Conn) {}
	}
	if c.PeekTimeout <= 0 {
		c.PeekTimeout = DefaultPeekTimeout
	}
	if c.HeadTimeout <= 0 {
		c.HeadTimeout = DefaultHeadTimeout
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	p := &Proxy{c: c, lns: map[net.Listener]struct{}{}, sessions: map[*session]struct{}{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if c.Bandwidth > 0 {
		p.out = newBucket(c.Bandwidth, time.Now)
		p.in = newBucket(c.Bandwidth, time.Now)
	}
	return p
}

// Stats returns the totals so far.
func (p *Proxy) Stats() Stats {
	return Stats{
		Allowed:  p.allowed.Load(),
		Denied:   p.denied.Load(),
		Failed:   p.failed.Load(),
		BytesOut: p.bytesOut.Load(),
		BytesIn:  p.bytesIn.Load(),
	}
}

// ErrClosed is returned by Serve* once Close has been called.
var ErrClosed = errors.New("egress proxy closed")

// ServeTransparent accepts connections the step's firewall redirected to
// l and handles each. It returns ErrClosed after Close, or the listener's
// error.
func (p *Proxy) ServeTransparent(l net.Listener) error {
	return p.serve(l, true, p.handleTransparent)
}

// ServeEndpoint accepts HTTP proxy clients (HTTP_PROXY / HTTPS_PROXY) on
// l: CONNECT host:port and absolute-form http:// requests, one request
// per connection.
func (p *Proxy) ServeEndpoint(l net.Listener) error {
	return p.serve(l, false, p.handleEndpoint)
}

// Close stops every listener, closes every connection and waits for
// every goroutine and Log call. It may be called more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		p.cancel()
		for l := range p.lns {
			l.Close()
		}
		for s := range p.sessions {
			s.closeAll()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

func (p *Proxy) serve(l net.Listener, transparent bool, handle func(*session)) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.Close()
		return ErrClosed
	}
	p.lns[l] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.lns, l)
		p.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if p.ctx.Err() != nil {
				return ErrClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || isTemporary(err) {
				// Out of descriptors and the like: wait a little, as
				// net/http does, instead of spinning or giving up.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(backoff):
				case <-p.ctx.Done():
					return ErrClosed
				}
				continue
			}
			return fmt.Errorf("egress proxy for step %q: accept on %s: %w", p.c.Step, l.Addr(), err)
		}
		backoff = 0
		s := &session{p: p, client: c, rec: egress.Conn{Type: "conn", Time: time.Now(), Step: p.c.Step}}
		s.ctx, s.cancel = context.WithCancel(p.ctx)
		p.mu.Lock()
		switch {
		case p.closed:
			p.mu.Unlock()
			s.cancel()
			c.Close()
			return ErrClosed
		case len(p.sessions) >= p.c.MaxConns:
			p.mu.Unlock()
			s.cancel()
			p.refuse(s, transparent)
			continue
		}
		p.sessions[s] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			defer p.end(s)
			defer func() {
				// A bug must not take the step's whole egress down, as
				// net/http keeps serving after a handler's panic; it is
				// on the connection's audit line.
				if v := recover(); v != nil {
					s.rec.Allow = false
					s.rec.Error = fmt.Sprintf("egress proxy internal error (please report it): %v", v)
				}
			}()
			handle(s)
		}()
	}
}

func isTemporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

// refuse turns away a connection over MaxConns, in the accept loop: a
// reset, and a log line (the original destination, when it is known,
// costs one system call).
func (p *Proxy) refuse(s *session, transparent bool) {
	if transparent { // an endpoint client names it in a request not read
		if dst, err := p.c.OriginalDst(s.client); err == nil {
			s.rec.Dst = dst.String()
		}
	}
	s.rec.Decision = egress.Decision{Reason: fmt.Sprintf("the step already has %d connections open, the most its egress proxy allows; close connections the job no longer needs", p.c.MaxConns)}
	reset(s.client)
	p.denied.Add(1)
	p.log(s.rec)
}

func (p *Proxy) log(c egress.Conn) {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	p.c.Log(c)
}

// end closes a session's connections, logs it and forgets it.
func (p *Proxy) end(s *session) {
	s.closeAll()
	s.rec.BytesOut = s.out.Load()
	s.rec.BytesIn = s.in.Load()
	s.rec.DurationMS = time.Since(s.rec.Time).Milliseconds()
	switch {
	case !s.rec.Allow:
		p.denied.Add(1)
	default:
		p.allowed.Add(1)
		if s.rec.Upstream == "" {
			p.failed.Add(1)
		}
	}
	p.log(s.rec)
	p.mu.Lock()
	delete(p.sessions, s)
	p.mu.Unlock()
}

// session is one client connection and, once dialled, its upstream.
type session struct {
	p       *Proxy
	ctx     context.Context // ends with the session or the proxy
	cancel  context.CancelFunc
	client  net.Conn
	mu      sync.Mutex
	up      net.Conn
	closed  bool
	rec     egress.Conn
	out, in atomic.Int64
}

func (s *session) setUpstream(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.up = c
	return true
}

func (s *session) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.cancel()
	s.client.Close()
	if s.up != nil {
		s.up.Close()
	}
}

// deny records a denial; the caller answers the client.
func (s *session) deny(d egress.Decision) {
	d.Allow = false
	s.rec.Decision = d
}

// reset closes c with a TCP RST rather than a FIN where it can.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

// forbidden answers an HTTP client 403 with the decision's reason.
func forbidden(c net.Conn, d egress.Decision) {
	writeStatus(c, "403 Forbidden", d.Reason)
}

func writeStatus(c net.Conn, status, text string) {
	body := "agentsandbox egress: " + oneLine(text) + "\n"
	_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	_, _ = io.WriteString(c, "HTTP/1.1 "+status+"\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\nConnection: close\r\n\r\n"+body)
	_ = c.SetWriteDeadline(time.Time{})
}

func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
}

// dial resolves name on the host (or takes addr when name is ""),
// checks every candidate with Rules.CheckUpstream and dials the first
// acceptable one that answers, always as an address:port literal.
func (p *Proxy) dial(s *session, name string, addr netip.Addr, port uint16) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(s.ctx, p.c.DialTimeout)
	defer cancel()
	var cands []netip.Addr
	if name == "" {
		cands = []netip.Addr{addr.Unmap()}
	} else {
		as, err := p.c.Resolve(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("resolve %q on the host: %w", name, err)
		}
		if len(as) == 0 {
			return nil, fmt.Errorf("resolve %q on the host: no addresses", name)
		}
		cands = as
	}
	var errs []error
	for _, a := range cands {
		a = a.Unmap()
		if !a.IsValid() {
			continue
		}
		if err := p.c.Live.Load().CheckUpstream(netip.AddrPortFrom(a, port), p.c.HostAddrs); err != nil {
			errs = append(errs, err)
			continue
		}
		target := netip.AddrPortFrom(a.WithZone(""), port).String()
		c, err := p.c.Dial(ctx, "tcp", target)
		if err == nil && c == nil {
			err = errors.New("the dialer returned no connection")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("dial %s: %w", target, err))
			continue
		}
		s.rec.Upstream = target
		return c, nil
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("no upstream address for %s", dialTarget(name, addr))
	}
	return nil, fmt.Errorf("no upstream address for %s could be used: %w", dialTarget(name, addr), errors.Join(errs...))
}

func dialTarget(name string, addr netip.Addr) string {
	if name != "" {
		return strconv.Quote(name)
	}
	return addr.String()
}

// connect dials upstream for an allowed session and records a failure.
func (s *session) connect(name string, addr netip.Addr, port uint16) bool {
	up, err := s.p.dial(s, name, addr, port)
	if err != nil {
		s.rec.Error = err.Error()
		s.rec.Upstream = ""
		return false
	}
	if !s.setUpstream(up) {
		s.rec.Error = "the egress proxy was closed"
		s.rec.Upstream = ""
		return false
	}
	return true
}

// pipe copies both ways until both directions end, one fails, the
// connection is idle for IdleTimeout or the proxy closes. fromClient,
// when set, is read instead of the client's connection (it holds bytes
// already read, then the connection). discard sends the client's further
// bytes nowhere (a forwarded request is complete) and counts none.
func (s *session) pipe(fromClient io.Reader, discard bool) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	done := make(chan error, 1)
	go func() {
		err := s.copy(s.up, s.client, nil, nil, s.p.in, &s.in, &s.p.bytesIn, &last)
		if err == nil && !discard {
			closeWrite(s.client)
		} else {
			s.closeAll() // a forwarded request ends with its answer
		}
		done <- err
	}()
	var err error
	if discard {
		var n1, n2 atomic.Int64
		err = s.copy(s.client, s.up, fromClient, io.Discard, nil, &n1, &n2, &last)
	} else {
		err = s.copy(s.client, s.up, fromClient, nil, s.p.out, &s.out, &s.p.bytesOut, &last)
		if err == nil {
			closeWrite(s.up)
		}
	}
	if err != nil {
		s.closeAll() // the other direction ends too
	}
	err2 := <-done
	for _, e := range []error{err, err2} {
		if e != nil && s.rec.Error == "" && s.p.ctx.Err() == nil && !errors.Is(e, net.ErrClosed) && !errors.Is(e, context.Canceled) && !errors.Is(e, errRefused) && !byJob(e) {
			s.rec.Error = e.Error()
		}
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

var errIdle = errors.New("idle timeout")

// copy moves bytes from src (the connection whose read deadline paces
// the idle timeout; r, when set, is read instead of it) to dst (or w),
// through bucket b. It returns nil at the end of src.
func (s *session) copy(src, dst net.Conn, r io.Reader, w io.Writer, b *bucket, mine, total *atomic.Int64, last *atomic.Int64) error {
	srcName, dstName := "the job", "upstream"
	if src == s.up {
		srcName, dstName = dstName, srcName
	}
	if r == nil {
		r = src
	}
	if w == nil {
		w = dst
	}
	idle := s.p.c.IdleTimeout
	if b == nil && r == src && w == dst {
		if err := s.splice(src, dst, mine, total, last, idle, srcName, dstName); err != errNoSplice {
			return err
		}
	}
	size := 32 << 10
	if b != nil && b.chunk() < size {
		size = b.chunk()
	}
	buf := make([]byte, size)
	var rd, wd deadline
	for {
		rd.set(src.SetReadDeadline, idle)
		n, err := r.Read(buf)
		if n > 0 {
			last.Store(time.Now().UnixNano())
			if b != nil {
				if werr := b.wait(s.ctx, n); werr != nil {
					return werr
				}
			}
			wd.set(dst.SetWriteDeadline, idle)
			m, werr := w.Write(buf[:n])
			mine.Add(int64(m))
			total.Add(int64(m))
			last.Store(time.Now().UnixNano())
			if werr != nil {
				return &sideError{side: dstName, op: "write to", err: werr}
			}
		}
		if err == nil {
			continue
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if time.Since(time.Unix(0, last.Load())) < idle {
				rd = deadline{} // the other direction is busy: set it afresh
				continue
			}
			return fmt.Errorf("%w: nothing moved either way for %s", errIdle, idle)
		}
		return &sideError{side: srcName, op: "read from", err: err}
	}
}

// deadline sets a connection's idle deadline lazily: again only once
// a sixteenth of the timeout has passed since the last time, instead of
// on every read and write (each set is a timer update), so the deadline
// is always between 15/16 and all of idle away.
type deadline struct{ at time.Time }

func (d *deadline) set(setter func(time.Time) error, idle time.Duration) {
	now := time.Now()
	if !d.at.IsZero() && now.Sub(d.at) < idle/16 {
		return
	}
	d.at = now
	_ = setter(now.Add(idle))
}

var errNoSplice = errors.New("no splice")

// spliceChunk is the most one splice round moves between deadline
// updates and counter updates.
const spliceChunk = 4 << 20

// splice moves bytes from one TCP connection to another without passing
// through user space (the kernel's splice(2), through Go's
// TCPConn.ReadFrom), for a connection with no bandwidth limit, in rounds
// of spliceChunk so that counters and idle deadlines stay current. It
// returns errNoSplice when either side is not a TCP connection.
func (s *session) splice(src, dst net.Conn, mine, total, last *atomic.Int64, idle time.Duration, srcName, dstName string) error {
	from, ok1 := src.(*net.TCPConn)
	to, ok2 := dst.(*net.TCPConn)
	if !ok1 || !ok2 {
		return errNoSplice
	}
	for {
		now := time.Now()
		_ = from.SetReadDeadline(now.Add(idle))
		_ = to.SetWriteDeadline(now.Add(idle))
		lr := &io.LimitedReader{R: from, N: spliceChunk}
		n, err := to.ReadFrom(lr)
		if n > 0 {
			mine.Add(n)
			total.Add(n)
			last.Store(time.Now().UnixNano())
		}
		switch {
		case err == nil && lr.N > 0:
			return nil // the end of src
		case err == nil:
			continue
		case errors.Is(err, os.ErrDeadlineExceeded):
			if time.Since(time.Unix(0, last.Load())) < idle {
				continue
			}
			return fmt.Errorf("%w: nothing moved either way for %s", errIdle, idle)
		default:
			// ReadFrom does not say which side failed: a read error is
			// the source's, anything else the destination's.
			var op *net.OpError
			if errors.As(err, &op) && op.Op == "read" {
				return &sideError{side: srcName, op: "read from", err: err}
			}
			return &sideError{side: dstName, op: "write to", err: err}
		}
	}
}

// sideError is a copy's failure on one side.
type sideError struct {
	side, op string
	err      error
}

func (e *sideError) Error() string { return e.op + " " + e.side + ": " + e.err.Error() }
func (e *sideError) Unwrap() error { return e.err }

// byJob reports whether err is the job ending its own connection
// abruptly (a reset, or writing to it after it went): that is the job's
// business, not a failure worth an audit line's error.
func byJob(err error) bool {
	var se *sideError
	return errors.As(err, &se) && se.side == "the job" &&
		(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE))
}
