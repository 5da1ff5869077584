// Package e2btest holds the end-to-end test of serve's E2B transport
// (server/e2b, docs/e2b.md): the unmodified e2b npm SDK, pinned by
// package-lock.json and installed with npm ci, driven by the node:test
// suite in test/ against the real `agentsandbox serve` as root. There is
// no Go API here.
package e2btest
