// Package server is the REST server of `agentsandbox serve`: it serves a
// sandboxes.Manager over HTTP on a unix socket (whose permissions decide
// who may connect; the peer's uid is who it is) and on TCP to the
// identities of an identities file (identities.go), each its own API
// key, owner and limits.
//
// The routes, their bodies and their answers are described by the OpenAPI
// 3.1 document openapi.json (served at GET /openapi.json, and checked
// against the routes and the types of package sandboxes by the tests) and
// by docs/api.md. Errors are JSON, {"error": {"code", "message",
// "decision"}}, with the HTTP status of the code; exec output is NDJSON (or
// Server-Sent Events), one sandboxes.ExecEvent per line, flushed as it
// comes.
//
// # Layout
//
// A request goes through three layers, each in its own files:
//
//   - server.go and listener.go: Options, New, the listeners (unix socket
//     with its peer's uid, TCP with a connection cap), drain and Shutdown,
//     and authentication; identities.go reads the identities file.
//   - http.go: the handler every request enters (Server.serve: recovery,
//     drain accounting, authentication, the per-identity limit of requests
//     in flight, body timeouts), strict JSON decoding of bodies, and the
//     JSON answers, including those the mux itself would give in text
//     (404, 405, redirects).
//   - routes.go: Server.handle registers one route (its pattern is kept
//     for the tests) and turns a route's error into its JSON answer;
//     Server.routes calls one register function per resource, in order.
//     Each is in the file of that resource's handlers, beside the
//     resource's request and answer types:
//     serviceRoutes (routes.go: GET /openapi.json and GET /v1/health, the
//     public routes, outside the per-identity limit), sandboxRoutes
//     (sandbox_routes.go), runRoutes (run_routes.go), networkRoutes
//     (network_routes.go), snapshotRoutes (snapshot_routes.go), execRoutes
//     (exec_routes.go, with the NDJSON/SSE stream) and fileRoutes
//     (file_routes.go, with the bounded put and the lazily begun get).
//     Options.Extra (the MCP endpoint /mcp of package server/mcp) are
//     registered after them by extra.go, and answer for themselves.
//   - transport.go: Options.Transports, other protocols on the same
//     listeners (E2B's control API and envd, package server/e2b). Each
//     picks its requests (Match) before the route table, may
//     authenticate them itself, and has the server's own errors written
//     in its shape; serve gives them the same recovery, drain and
//     per-identity limit.
//
// A new route is registered in its resource's register function (or a
// new one, called from Server.routes) and documented in openapi.json;
// testdata/routes.golden lists the route table, in order, with whether
// each route needs an identity and takes part in the per-identity limit
// (go test ./server -run TestRoutesGolden -update rewrites it), and
// TestRoutesMatchOpenAPI holds the document to the routes.
package server
