package server

import (
	"fmt"
	"net/http"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// Transport is another protocol the server's listeners serve beside the
// REST API, over the same Manager, such as E2B's control API and its
// in-sandbox daemon (package server/e2b). Its requests go through the same
// recovery, drain and per-identity limit of requests in flight as the
// API's; the server's own errors (a wrong token, the limit, shutting
// down) are written in the transport's shape.
type Transport struct {
	// Name says which transport it is, in the server's log.
	Name string
	// Match says whether a request is the transport's. Transports are
	// asked in order before the API's routes; their requests must not be
	// the API's (testdata/routes.golden).
	Match func(r *http.Request) bool
	// Authenticate, when set, replaces the server's authentication for
	// the transport's requests: it returns the identity the request acts
	// for, or public for one that acts for nobody (and takes no part in
	// the limit of requests in flight). Without it the request needs an
	// identity's token, as the API's do.
	Authenticate func(r *http.Request) (id sandboxes.Identity, public bool, err error)
	// WriteError answers r with err, an *sandboxes.Error of the server,
	// whose HTTP status is status.
	WriteError func(w http.ResponseWriter, r *http.Request, status int, err *sandboxes.Error)
	// Handler answers the transport's requests; their context carries
	// the identity (sandboxes.IdentityFrom) unless public.
	Handler http.Handler
}

// transportFor is the transport whose request r is, nil for the API's.
func (s *Server) transportFor(r *http.Request) *Transport {
	for i := range s.o.Transports {
		if s.o.Transports[i].Match(r) {
			return &s.o.Transports[i]
		}
	}
	return nil
}

// fail answers r with err in the shape of t (the API's when t is nil).
func (s *Server) fail(t *Transport, w http.ResponseWriter, r *http.Request, err error) {
	if t == nil {
		writeError(w, err)
		return
	}
	b := errorBody(err)
	t.WriteError(w, r, Status(b.Error.Code), &b.Error)
}

// authenticateFor is who r acts for: t's authentication when it has one,
// else the server's. A Manager identity a transport returns has the
// server's limit of requests in flight of the server's identity of that
// name (the default for any other).
func (s *Server) authenticateFor(t *Transport, r *http.Request) (id Identity, public bool, err error) {
	if t == nil || t.Authenticate == nil {
		id, err := s.authenticate(r)
		return id, false, err
	}
	mid, public, err := t.Authenticate(r)
	if err != nil || public {
		return Identity{}, public, err
	}
	for _, known := range s.ids {
		if known.Name == mid.Name {
			return Identity{Identity: mid, MaxInFlight: known.MaxInFlight}, false, nil
		}
	}
	return Identity{Identity: mid}, false, nil
}

// checkTransports refuses transports without what they need.
func checkTransports(ts []Transport) error {
	for i, t := range ts {
		if t.Match == nil || t.WriteError == nil || t.Handler == nil {
			return fmt.Errorf("server: Options.Transports[%d] (%s) needs Match, WriteError and Handler", i, t.Name)
		}
	}
	return nil
}
