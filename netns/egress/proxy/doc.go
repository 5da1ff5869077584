// Package proxy is the egress proxy the host runs for one step, one of
// the servers of the network room (netns/egress): every TCP
// connection the job opens (loopback aside) is redirected by the step's
// firewall to a listener the host made inside the step's network
// namespace, and this package accepts it there, decides it with
// egress.Rules and dials upstream from the host.
//
// A redirected connection (ServeTransparent) is handled so:
//
//  1. its original destination comes from the socket (SO_ORIGINAL_DST);
//     an address the step's resolver handed out (egress.MappedPrefix)
//     stands for the name it was given, and one it never gave is denied;
//  2. the first bytes the job sends are peeked at for a TLS ClientHello's
//     server name or an HTTP/1 request's host (Host header, absolute or
//     CONNECT target): the proxy waits Config.PeekTimeout for a first
//     byte, then Config.HeadTimeout for the whole ClientHello (over up to
//     MaxHelloRecords records, at most MaxClientHello) or request head (at
//     most MaxRequestHead). One that passes those bounds, or that the
//     parser cannot read for certain (two Host headers, a folded header,
//     a malformed ClientHello), is denied: a connection never goes
//     through as one that named no host because its name came late or
//     large. A client that sends nothing within PeekTimeout is taken for
//     a server-first protocol and dialled; its first bytes, whenever they
//     come, are judged the same way before any goes upstream (the gate);
//     peeked bytes go upstream first;
//  3. a name from the resolver that the job then contradicts in SNI or
//     Host is denied; a connection to an address the resolver did not
//     give is judged by its address (CIDR rules) alone, and the name it
//     claims is logged (and can only make it forbidden, never allowed);
//  4. a denied connection is closed (an HTTP request gets a 403 with the
//     reason and the entry that would allow it; anything else a reset);
//  5. an allowed one is resolved again on the host (Config.Resolve), every
//     candidate address is checked with Rules.CheckUpstream (internal
//     addresses, the host's own among them, Config.HostAddrs, are refused
//     unless the operator opened them), and only the checked address:port
//     literal is ever handed to Config.Dial; bytes
//     are copied both ways with half-close, an idle timeout and the step's
//     bandwidth limit (one token bucket per direction, shared by all of
//     the step's connections);
//  6. one egress.Conn audit line is passed to Config.Log when it ends.
//
// ServeEndpoint is the same proxy as an HTTP(S)_PROXY endpoint: CONNECT
// host:port, whose tunnel's first bytes are judged like a redirected
// connection's (a ClientHello in it must name the tunnel's host), and
// absolute-form http:// requests. An absolute-form request
// is forwarded alone: the proxy asks upstream to close after its answer
// (Connection: close) and ends the client's connection after it, so every
// request is decided on its own connection; clients open a new one.
//
// Everything is bounded: the peek (a ClientHello of 32 KiB over 256
// records, a request head of 32 KiB), endpoint request heads (32 KiB), the
// number of concurrent connections (Config.MaxConns; beyond it a
// connection is refused and logged) and every wait. Close stops the
// listeners, closes every connection and returns when every goroutine has
// ended and every Log call has been made.
package proxy
