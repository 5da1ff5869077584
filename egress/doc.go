// Package egress is the pure core of a step's network egress: the rules a
// step's network.allow and the policy's forbidden list make, the decision
// for one connection, the private addresses the step's resolver hands out
// for allowed names, and the audit log's entries.
//
// It makes no system calls and opens no sockets. The resolver
// (netns/egress/dns), the transparent proxy (netns/egress/proxy) and the firewall in
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
//
// # Internal addresses
//
// The egress proxy never dials an internal address for a workflow unless
// the operator's policy data opens it (data.agentsandbox.egress_internal;
// Rules.CheckUpstream). An address is internal when it lies in one of the
// special ranges (SpecialRange: loopback, link-local and cloud metadata, private,
// shared, benchmarking, multicast, reserved and their IPv6 kin), when it
// is one of the host's own addresses (HostAddrs), or when it is an IPv6
// address that carries an IPv4 address that is internal: IPv4-mapped
// (::ffff:a.b.c.d), IPv4-translated (::ffff:0:a.b.c.d), IPv4-compatible
// (::a.b.c.d), 6to4 (2002:AABB:CCDD::/48), Teredo (2001:0::/32; both the
// server's and the client's address, the client's with its bits
// inverted) and NAT64 (64:ff9b::/96, and the /96 form inside the
// local-use 64:ff9b:1::/48). Such an address is judged as the IPv4
// address it carries, since a host with a tunnel, relay or translator on
// its path delivers it there.
//
// Classify is the whole judgement of one address, and what other fetches
// the host makes on a workflow's behalf (inputs, for one) use against
// server-side request forgery: with the host's addresses from
// egress/hostaddr,
//
//	in, err := egress.Classify(addr, hostaddr.Default)
//	if err != nil || len(in) > 0 {
//		// refuse addr: err, or in[0].String(), says why
//	}
//
// and dial the checked address literally. Embedded lists the IPv4
// addresses an IPv6 address carries, SpecialRange the special range of
// one address (compatible with its first form: an embedded address now
// reports its IPv4 address's range), ClassifyPrefix whether a whole
// prefix is internal (what admission refuses in network.allow), and
// InternalEntry that judgement against the operator's openings. These
// are stable: new forms and ranges may be added, none removed.
package egress
