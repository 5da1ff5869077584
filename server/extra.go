package server

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
)

// extraRoutes registers Options.Extra. Their handlers get the plain
// response writer (not the mux's JSON rewriting of 404 and 405: a
// protocol such as MCP answers those itself), behind the same recovery,
// drain, authentication and per-client limit as the API's routes.
func (s *Server) extraRoutes() (err error) {
	for _, pattern := range slices.Sorted(maps.Keys(s.o.Extra)) {
		h := s.o.Extra[pattern]
		if h == nil {
			return fmt.Errorf("server: Options.Extra[%q] is nil: give it a handler or leave the pattern out", pattern)
		}
		// The mux panics on an invalid pattern or one that conflicts
		// with a route.
		func() {
			defer func() {
				if v := recover(); v != nil {
					err = fmt.Errorf("server: Options.Extra[%q]: %v: choose a pattern the API's routes do not use, such as \"/mcp\"", pattern, v)
				}
			}()
			s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
				h.ServeHTTP(w.(*muxWriter).respWriter, r)
			})
		}()
		if err != nil {
			return err
		}
		s.patterns = append(s.patterns, pattern)
		s.extra = append(s.extra, pattern)
	}
	return nil
}
