package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

//go:embed openapi.json
var openAPI []byte

// Defaults of Options.
const (
	DefaultMaxBodyBytes           = 1 << 20
	DefaultMaxConcurrentPerClient = 16
	DefaultBodyTimeout            = 30 * time.Second
	DefaultHeaderTimeout          = 10 * time.Second
	DefaultIdleTimeout            = 30 * time.Second
	DefaultMaxConnections         = 1024
)

// Options configure a Server.
type Options struct {
	Manager sandboxes.Manager
	// Identities are who may call on TCP, each by its token
	// (Authorization: Bearer TOKEN or X-API-Key: TOKEN): at least one is
	// required to serve TCP. Requests on the unix socket are their peer's
	// uid's.
	Identities []Identity
	// Token is the one token of serve --token-file: the user identity
	// TokenIdentity ("token"), with only the server's limits on its
	// sandboxes and runs. Give Token or Identities, not both.
	Token string
	// MaxBodyBytes bounds a JSON request body (default 1 MiB). File
	// bodies are bounded by sandboxes.MaxFileBytes.
	MaxBodyBytes int64
	// MaxConcurrentPerClient bounds the requests one identity has in
	// flight (default 16) unless its Identity.MaxInFlight says otherwise:
	// the unix socket's uids and Token's identity; more are answered
	// 429.
	MaxConcurrentPerClient int
	// BodyTimeout is the longest the server waits for the next bytes of a
	// request's body, its first included (default 30s): a body that stops
	// arriving is answered 408 (code timeout) and its connection closed.
	BodyTimeout time.Duration
	// HeaderTimeout bounds how long a connection may take to send a
	// request's headers (default 10s), and IdleTimeout how long one waits
	// for its next request (default 30s); a client without the token is
	// answered 401 and its connection closed.
	HeaderTimeout, IdleTimeout time.Duration
	// MaxConnections bounds the connections each listener Serve serves
	// holds open at once (default 1024); one more is answered 429 (code
	// limit_exceeded) and closed at once, so connections beyond it cost
	// no descriptor for longer than that.
	MaxConnections int
	// Version is what GET /v1/health reports.
	Version string
	// Logf logs what the server cannot tell a client (nil: silent).
	Logf func(format string, args ...any)
	// Extra are more handlers by http.ServeMux pattern, such as "/mcp"
	// for the MCP server of package server/mcp. They are served behind the
	// same authentication, drain and per-client limit as the API, and are
	// not described by openapi.json.
	Extra map[string]http.Handler
	// Transports are other protocols served on the same listeners, such
	// as E2B's (package server/e2b): transport.go.
	Transports []Transport
}

// Server serves a Manager over HTTP.
type Server struct {
	o         Options
	ids       []Identity // TCP's, from Identities or Token
	mux       *http.ServeMux
	handler   http.Handler
	patterns  []string // as registered, in order
	extra     []string // the patterns of Options.Extra
	fileLimit int64    // tests lower sandboxes.MaxFileBytes

	mu       sync.Mutex
	closing  bool
	inflight int
	idle     chan struct{} // closed when inflight drops to 0 while closing
	perKey   map[string]int
	servers  []*http.Server
	cancel   context.CancelFunc // of the requests' base context
	baseCtx  context.Context
	shutdown bool
}

// New checks o and returns a Server.
func New(o Options) (*Server, error) {
	if o.Manager == nil {
		return nil, errors.New("server: Options.Manager is nil: give the server a sandboxes.Manager")
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxConcurrentPerClient <= 0 {
		o.MaxConcurrentPerClient = DefaultMaxConcurrentPerClient
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = DefaultBodyTimeout
	}
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = DefaultHeaderTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	ids, err := checkIdentities(o)
	if err == nil {
		err = checkTransports(o.Transports)
	}
	if err != nil {
		return nil, err
	}
	s := &Server{o: o, ids: ids, mux: http.NewServeMux(), perKey: map[string]int{}}
	s.baseCtx, s.cancel = context.WithCancel(context.Background())
	s.routes()
	if err := s.extraRoutes(); err != nil {
		s.cancel()
		return nil, err
	}
	s.handler = http.HandlerFunc(s.serve)
	return s, nil
}

// Handler is the server's handler. Requests that do not come through
// Serve on a unix listener (ListenUnix) need the bearer token.
func (s *Server) Handler() http.Handler { return s.handler }

// connKey is the context key of a connection's peer.
type connKey struct{}

// peer is who is on the other end of a connection.
type peer struct {
	unix bool
	uid  int // -1 when unknown
}

func (s *Server) connContext(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitedConn); ok {
		c = lc.Conn
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	p := peer{unix: true, uid: -1}
	if raw, err := uc.SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) {
			if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
				p.uid = int(cred.Uid)
			}
		})
	}
	return context.WithValue(ctx, connKey{}, p)
}

// ListenUnix creates the unix socket at path, mode 0600 and owned by the
// caller. It refuses to replace a file that is not a socket, and removes
// a socket left by a server that is gone (nobody answers on it).
func ListenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("listen on %s: a file that is not a socket is there; remove it or choose another path", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen on %s: another server answers on this socket; stop it or choose another path", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("listen on %s: remove the stale socket: %w", path, err)
		}
	}
	// The umask makes the socket 0600 from its creation, with no window
	// in which another user could connect. (The umask is the process's:
	// a file another goroutine creates meanwhile gets stricter
	// permissions, never looser ones.)
	old := syscall.Umask(0o177)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return l, nil
}

// ListenTCP listens on the TCP address addr for Serve. It refuses
// before it binds when the server has no identity to authenticate a TCP
// client with, as Serve would.
func (s *Server) ListenTCP(addr string) (net.Listener, error) {
	if len(s.ids) == 0 {
		return nil, errNoIdentities(addr)
	}
	return net.Listen("tcp", addr)
}

func errNoIdentities(addr any) error {
	return fmt.Errorf("serve on %v: no identities or token: TCP clients must authenticate; give identities or a token, or serve on a unix socket only", addr)
}

// Serve serves on l until Shutdown, then returns nil. Connections of a
// unix listener are their peer's uid's; others need an identity's token,
// and Serve refuses a TCP listener without identities.
func (s *Server) Serve(l net.Listener) error {
	if _, ok := l.(*net.UnixListener); !ok && len(s.ids) == 0 {
		l.Close()
		return errNoIdentities(l.Addr())
	}
	hs := &http.Server{
		Handler:           s.handler,
		ConnContext:       s.connContext,
		BaseContext:       func(net.Listener) context.Context { return s.baseCtx },
		ReadHeaderTimeout: s.o.HeaderTimeout,
		IdleTimeout:       s.o.IdleTimeout,
		// No read timeout: bodies are bounded by BodyTimeout between
		// reads (bodyTimer), and the server's watch for a client that goes
		// away reads during a stream. No write timeout: an exec's stream
		// lasts as long as the command.
	}
	l = s.limitListener(l)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		l.Close()
		return nil
	}
	s.servers = append(s.servers, hs)
	s.mu.Unlock()
	err := hs.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting, lets the requests in flight finish until ctx
// is done (then cancels them), and closes the Manager.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		return errors.New("server: Shutdown was already called")
	}
	s.shutdown, s.closing = true, true
	servers := s.servers
	var idle chan struct{}
	if s.inflight > 0 {
		idle = make(chan struct{})
		s.idle = idle
	}
	s.mu.Unlock()

	var errs []error
	for _, hs := range servers {
		if err := hs.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop serving: %w", err))
		}
	}
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("wait for the requests in flight: %w", ctx.Err()))
		}
	}
	s.cancel()
	for _, hs := range servers {
		hs.Close()
	}
	// The manager gets its own time to stop the sandboxes, even if ctx
	// ran out waiting for the requests.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := s.o.Manager.Close(mctx); err != nil {
		errs = append(errs, fmt.Errorf("close the sandboxes: %w", err))
	}
	return errors.Join(errs...)
}

// enter counts a request in flight, unless the server is closing.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.inflight++
	return true
}

func (s *Server) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	if s.inflight == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
}

// acquire takes one of id's slots of requests in flight.
func (s *Server) acquire(id Identity) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perKey[id.Name] >= s.maxInFlight(id) {
		return false
	}
	s.perKey[id.Name]++
	return true
}

func (s *Server) maxInFlight(id Identity) int {
	if id.MaxInFlight > 0 {
		return id.MaxInFlight
	}
	return s.o.MaxConcurrentPerClient
}

func (s *Server) release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perKey[key]--; s.perKey[key] <= 0 {
		delete(s.perKey, key)
	}
}

// checkIdentities checks o's identities and returns TCP's: Identities,
// or Token as TokenIdentity.
func checkIdentities(o Options) ([]Identity, error) {
	if o.Token != "" && len(o.Identities) > 0 {
		return nil, errors.New("server: give Options.Token or Options.Identities, not both: put the token's SHA-256 in an identity")
	}
	if o.Token != "" {
		return []Identity{{Identity: sandboxes.Identity{Name: TokenIdentity}, TokenSHA256: sha256.Sum256([]byte(o.Token))}}, nil
	}
	names := map[string]bool{}
	tokens := map[[32]byte]bool{}
	for _, id := range o.Identities {
		if err := sandboxes.ValidIdentityName(id.Name); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		switch {
		case strings.HasPrefix(id.Name, unixPrefix):
			return nil, fmt.Errorf("server: identity %q: names starting with %q are the unix socket's", id.Name, unixPrefix)
		case names[id.Name]:
			return nil, fmt.Errorf("server: two identities are named %q", id.Name)
		case id.TokenSHA256 == [32]byte{} || id.TokenSHA256 == sha256.Sum256(nil):
			return nil, fmt.Errorf("server: identity %q has no token", id.Name)
		case tokens[id.TokenSHA256]:
			return nil, fmt.Errorf("server: identity %q has the token of another", id.Name)
		}
		names[id.Name], tokens[id.TokenSHA256] = true, true
	}
	return o.Identities, nil
}

// unixIdentity is the identity of the unix socket's peer with uid: uid 0
// is the admin uid-0, any other the user uid-N with the default limits.
func (s *Server) unixIdentity(uid int) Identity {
	name := unixPrefix + strconv.Itoa(uid)
	if uid == 0 {
		return Identity{Identity: sandboxes.Identity{Name: name, Admin: true}}
	}
	return Identity{Identity: sandboxes.Identity{Name: name, MaxSandboxes: DefaultIdentityMaxSandboxes, MaxRuns: DefaultIdentityMaxRuns}}
}

// authenticate returns the request's identity, or an error.
func (s *Server) authenticate(r *http.Request) (Identity, error) {
	if p, ok := r.Context().Value(connKey{}).(peer); ok && p.unix {
		if p.uid < 0 {
			return Identity{}, sandboxes.Errorf(sandboxes.CodeAuth, "the server could not read who is on the other end of the unix socket (SO_PEERCRED); connect from a process of this host")
		}
		return s.unixIdentity(p.uid), nil
	}
	if len(s.ids) == 0 {
		return Identity{}, sandboxes.Errorf(sandboxes.CodeAuth, "this server takes requests on its unix socket only: connect with curl --unix-socket PATH")
	}
	tok, err := requestToken(r)
	if err != nil {
		return Identity{}, err
	}
	// Every identity's hash is compared, in constant time, so the time
	// taken says nothing of which one matched.
	h := sha256.Sum256([]byte(tok))
	found := -1
	for i := range s.ids {
		if subtle.ConstantTimeCompare(h[:], s.ids[i].TokenSHA256[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Identity{}, sandboxes.Errorf(sandboxes.CodeAuth, "wrong token: send the token of one of this server's identities")
	}
	return s.ids[found], nil
}

// requestToken is the token a TCP request sends: "Authorization: Bearer
// TOKEN" or "X-API-Key: TOKEN" (E2B's SDK sends that), not two different
// ones.
func requestToken(r *http.Request) (string, error) {
	var bearer string
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok || tok == "" {
			return "", sandboxes.Errorf(sandboxes.CodeAuth, "the Authorization header is not a bearer token: send \"Authorization: Bearer TOKEN\" (or \"X-API-Key: TOKEN\") with your identity's token")
		}
		bearer = tok
	}
	key := r.Header.Get("X-API-Key")
	switch {
	case bearer != "" && key != "" && subtle.ConstantTimeCompare([]byte(bearer), []byte(key)) != 1:
		return "", sandboxes.Errorf(sandboxes.CodeAuth, "the bearer token and the X-API-Key header differ: send one token")
	case bearer != "":
		return bearer, nil
	case key != "":
		return key, nil
	}
	return "", sandboxes.Errorf(sandboxes.CodeAuth, "no bearer token: send the header \"Authorization: Bearer TOKEN\" (or \"X-API-Key: TOKEN\") with your identity's token")
}
