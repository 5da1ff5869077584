// Package js holds the JavaScript client of `agentsandbox serve`
// (clients/js: @agentsandbox/client, ESM, Node built-ins for HTTP, and
// LangChain tools over a sandbox) and the Go tests that run its node:test
// suite and its example agent loop against a real server: fakeserve
// without root, and the real `agentsandbox serve` in the root tier. There
// is no Go API here.
package js
