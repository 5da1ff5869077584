// Package e2b serves the sandboxes of a sandboxes.Manager to the
// unmodified E2B SDK (npm e2b; docs/e2b.md): E2B's control API and its
// in-sandbox daemon envd, as two server.Transports on the listeners of
// `agentsandbox serve`, beside the REST API and MCP.
//
// It is one more transport over the same Manager: every create, command,
// file read and write is the Manager's, judged by the same policy,
// recorded in the same record, owned by the same identity and held to
// the same limits. What the package keeps itself is only what E2B's
// protocol has and the Manager does not: a random envd access token per
// sandbox created through it, the identity that token acts for, the
// template id, and numeric pids for the Manager's exec ids.
//
// Requests that carry E2b-Sandbox-Id are envd's (envd.go, files.go);
// others on E2B's control paths (/v2/sandboxes, /sandboxes/...,
// /snapshots, /templates) are the control API's (control.go), which
// authenticates like the REST API (X-API-Key is an identity's token) and
// answers errors as E2B's {code, message}. envd authenticates by the
// sandbox's token (X-Access-Token), except GET /health, and acts for the
// sandbox's creator.
//
// envd speaks Connect over HTTP/1.1 with the JSON codec, written by hand
// here (connect.go, messages.go) rather than with connectrpc.com/connect
// and generated code: the SDK uses the JSON codec only, over a dozen
// small messages, and the protocol's part it needs (unary JSON, one
// request envelope, response envelopes and the end-of-stream envelope,
// error codes, Connect-Timeout-Ms) is a few hundred lines, without a
// protobuf toolchain, generated files or a new module in the build.
//
// Built: create, connect (a running sandbox), list (metadata filter,
// paging), getInfo, kill and setTimeout, snapshots (create, list, create
// from one) and fork (snapshots.go, the workspace only); process Start (with keepalives
// and Connect-Timeout-Ms as the command's timeout), Connect (reattach),
// List and SendSignal; GET and POST /files,
// Stat, ListDir (with depth) and Remove; GET /health. Every other route
// of E2B's answers 501 (control API) or Connect's unimplemented (envd),
// saying it is not built yet.
package e2b
