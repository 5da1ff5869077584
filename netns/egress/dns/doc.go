// Package dns is a step's own DNS resolver, one of the servers of the
// network room (netns/egress). It runs inside the step's network
// namespace (the caller creates its UDP and TCP sockets there, on
// egress.Gateway port 53, and hands them to Server.Serve) and answers from
// the step's egress rules alone:
//
//   - a name a network.allow entry names (exactly, or strictly below a
//     "*.domain" entry) and the policy does not forbid: type A gets one
//     record, a private address from egress.MappedPrefix that stands for
//     the name (the same address every time, a different one per name);
//     AAAA and every other type get NOERROR with no records;
//   - a PTR query for an address the resolver gave out gets the name back;
//   - every other name gets NXDOMAIN.
//
// Nothing is ever resolved upstream, and no answer comes from outside the
// step's rules. A job therefore cannot carry data out in the names it asks
// for (DNS tunnelling through a recursive resolver), and the answers tell it
// nothing about the outside: the transparent proxy (netns/egress/proxy)
// maps the private address back to the name, judges the connection and
// resolves the name itself at dial time.
//
// Every query is passed to Server.Log as one egress.Query, up to
// Server.MaxLogged per step; one last line then counts the queries that
// were answered without a line of their own.
//
// The server expects hostile input: a malformed message is answered
// FORMERR (or dropped, when it is not even a query), TCP messages and
// connection times are bounded, and so is the number of TCP connections.
package dns
