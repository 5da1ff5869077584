// Package egress is the pure core of a step's network egress: the rules a
// step's network.allow and the policy's forbidden list make, the decision
// for one connection, the private addresses the step's resolver hands out
// for allowed names, and the audit log's entries.
//
// It makes no system calls and opens no sockets. The resolver
// (egress/dns), the transparent proxy (egress/proxy) and the firewall in
// the step's network namespace (netns) enforce what it decides.
//
// A connection is decided in this order, and the first match wins:
//
//  1. a forbidden entry (policy data agentsandbox.egress_deny) that
//     matches the name or the address denies;
//  2. an exact host[:port] rule allows;
//  3. a *.domain[:port] rule allows a name below the domain (not the
//     domain itself);
//  4. a CIDR[:port] rule (or a single address) allows an address inside it;
//  5. nothing matched: denied, with a hint naming the entry that would
//     allow it.
//
// Names are only ever known from the step's own resolver (the job looked
// the name up), from TLS SNI or from an HTTP Host header; an address the
// job dialled directly is judged by CIDR rules alone, whatever name it
// claims. At dial time every upstream address is checked again
// (Rules.CheckUpstream): internal addresses (loopback, link-local with
// cloud metadata, private, shared and the other special ranges, the
// host's own addresses, and IPv6 forms that carry such an IPv4 address:
// mapped, compatible, 6to4, Teredo, NAT64) are refused unless the
// operator's policy data opens them (data.agentsandbox.egress_internal).
// No network.allow entry opens one. Classify is that judgement for any
// other fetch the host makes on a workflow's behalf.
package egress
