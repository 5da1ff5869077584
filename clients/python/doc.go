// Package python holds the Python client of `agentsandbox serve`
// (clients/python/agentsandbox, standard library only) and the Go tests
// that run its unittest suite and its example agent loop against a real
// server: fakeserve without root, and the real `agentsandbox serve` in the
// root tier. There is no Go API here.
package python
