package e2b

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server"
)

// EnvdVersion is the envd version the control API reports for every
// sandbox. The SDK gates features on it (docs/e2b.md): at 0.5.7 it sends
// no default user (0.4.0) and may upload files as octet-stream (0.5.7),
// both of which this server takes.
const EnvdVersion = "0.5.7"

// envdPort is envd's port, which the SDK sends as E2b-Sandbox-Port.
const envdPort = "49983"

// DefaultTimeout is a sandbox's lifetime when a create gives none,
// E2B's default (300 s).
const DefaultTimeoutSeconds = 300

// Home is the home directory E2B's programs expect; it is the sandbox's
// workspace.
const Home = "/home/user"

// sandboxWorkspace is where the workspace is inside the sandbox, a
// command's working directory and HOME.
const sandboxWorkspace = "/workspace"

// Service is the E2B transport over a Manager. What it keeps itself is
// only what E2B's protocol has and the Manager does not: each sandbox's
// envd access token, the identity that token acts for, the template id
// it was created from, and the numeric pids of its commands. Every
// action goes to the Manager, as the caller's.
type Service struct {
	m sandboxes.Manager
	o Options

	mu    sync.Mutex
	boxes map[string]*box // by sandbox id
}

// box is what the transport keeps of a sandbox created through it.
type box struct {
	id       string
	token    string
	owner    sandboxes.Identity
	template string

	mu    sync.Mutex
	next  uint32
	procs map[uint32]*proc
}

// proc is a command started through envd: its pid, exec and what the
// client asked for (which List reports back).
type proc struct {
	pid    uint32
	execID string
	config processConfig
	tag    *string
	pty    bool // its output is a pty's (pty.go)
}

// Options configure a Service.
type Options struct {
	// Logf logs what the transport cannot tell a client: the host's
	// failures (code internal) and errors after an answer began (nil:
	// silent).
	Logf func(format string, args ...any)
}

// New returns the E2B transport of m.
func New(m sandboxes.Manager, o Options) *Service {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return &Service{m: m, o: o, boxes: map[string]*box{}}
}

// logInternal logs err of r when it is the host's failure, which the
// client's message alone does not let an operator see.
func (s *Service) logInternal(r *http.Request, err error) {
	if err != nil && sandboxes.CodeOf(err) == sandboxes.CodeInternal {
		if _, ok := err.(*rpcError); !ok {
			s.o.Logf("e2b: %s %s: %v", r.Method, r.URL.Path, err)
		}
	}
}

// Transports are the control API and envd, for server.Options.Transports.
func (s *Service) Transports() []server.Transport {
	return []server.Transport{
		{Name: "e2b-envd", Match: isEnvd, Authenticate: s.authenticateEnvd, WriteError: writeEnvdServerError, Handler: http.HandlerFunc(s.serveEnvd)},
		{Name: "e2b-api", Match: isControl, WriteError: writeControlServerError, Handler: s.controlHandler()},
	}
}

// isEnvd: every envd request of the SDK names its sandbox.
func isEnvd(r *http.Request) bool { return r.Header.Get("E2b-Sandbox-Id") != "" }

// controlPrefixes are the paths of E2B's control API, none of which is
// the REST API's (/v1/..., /openapi.json, /mcp).
var controlPrefixes = []string{"/sandboxes", "/v2/sandboxes", "/snapshots", "/templates", "/v2/templates"}

func isControl(r *http.Request) bool {
	if isEnvd(r) {
		return false
	}
	for _, p := range controlPrefixes {
		if r.URL.Path == p || strings.HasPrefix(r.URL.Path, p+"/") {
			return true
		}
	}
	return false
}

// newToken is a random envd access token.
func newToken() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

func (s *Service) box(id string) *box {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.boxes[id]
}

func (s *Service) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.boxes, id)
}

// authenticateEnvd is who an envd request acts for: the identity of its
// sandbox's creator, when it sends the sandbox's access token
// (X-Access-Token). GET /health needs none, and acts for nobody. A
// sandbox with no token is not found, whatever the request sends.
func (s *Service) authenticateEnvd(r *http.Request) (sandboxes.Identity, bool, error) {
	if r.Method == http.MethodGet && r.URL.Path == "/health" {
		return sandboxes.Identity{}, true, nil
	}
	id := r.Header.Get("E2b-Sandbox-Id")
	b := s.box(id)
	// A sandbox without a token is not running (or was never given one):
	// the same as GET /health, public, says, which is all E2B's proxy says
	// of a sandbox that is gone.
	if b == nil {
		return sandboxes.Identity{}, false, sandboxes.Errorf(sandboxes.CodeNotFound, "sandbox %q is not running (or has no envd access token: Sandbox.connect gives one)", id)
	}
	tok := r.Header.Get("X-Access-Token")
	if tok == "" && r.URL.Path == "/files" && r.URL.Query().Has("signature") {
		if err := checkFileSignature(r, b.token, time.Now()); err != nil {
			return sandboxes.Identity{}, false, err
		}
		return b.owner, false, nil
	}
	if tok == "" {
		return sandboxes.Identity{}, false, sandboxes.Errorf(sandboxes.CodeAuth, "no X-Access-Token: send the envdAccessToken the control API returned when it created the sandbox")
	}
	if subtle.ConstantTimeCompare([]byte(tok), []byte(b.token)) != 1 {
		return sandboxes.Identity{}, false, sandboxes.Errorf(sandboxes.CodeAuth, "wrong X-Access-Token for sandbox %q: send the envdAccessToken of its create or connect", id)
	}
	return b.owner, false, nil
}

// writeEnvdServerError answers an error of the server itself (a wrong
// token, the limit, shutting down) on envd: a Connect error, which for a
// server stream is its end-of-stream envelope (the SDK reads no error
// body of a stream's non-200 answer, only the status).
func writeEnvdServerError(w http.ResponseWriter, r *http.Request, status int, err *sandboxes.Error) {
	e := &rpcError{Code: connectCode(err.Code), Message: err.Message}
	if r.Header.Get("Content-Type") == streamType {
		newEventStream(w).end(e)
		return
	}
	writeJSON(w, status, unaryType, e)
}

// writeControlServerError answers it on the control API, as E2B's
// {code, message}.
func writeControlServerError(w http.ResponseWriter, _ *http.Request, status int, err *sandboxes.Error) {
	writeJSON(w, status, "application/json", apiError{Code: status, Message: err.Message})
}
