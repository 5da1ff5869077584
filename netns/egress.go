package netns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"unsafe"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The firewall of a step's network room. SetupEgress gives the namespace
// the room's addresses and one nftables table, EgressTable, which sends
// every TCP connection that leaves the step to the transparent proxy,
// lets DNS reach the step's resolver on egress.Gateway, and drops and
// counts everything else.
const (
	// EgressTable is the inet table SetupEgress creates.
	EgressTable = "agentsandbox"
	// EgressLink is the device that holds the room's addresses in
	// namespace mode; the default routes point at it. It is one end of a
	// veth pair whose other end, EgressPeer, has no address: what leaves
	// through it (only what the firewall lets out, which is nothing a
	// step sends) goes nowhere. A veth pair rather than a dummy device
	// because kernels built without modules often lack dummy.
	EgressLink = "asb0"
	EgressPeer = "asb0p"
)

// The named counters of dropped traffic, one per filter chain.
const (
	counterOutput  = "drop_output"
	counterInput   = "drop_input"
	counterForward = "drop_forward"
)

// Egress says where a step's traffic goes.
type Egress struct {
	// ProxyPort is the transparent proxy's listener inside the
	// namespace, on all addresses: every TCP connection to a
	// non-loopback address is redirected to it.
	ProxyPort uint16
	// EndpointPort is the HTTP(S)_PROXY endpoint inside the namespace,
	// on egress.Gateway (0: none). Connections to it are not redirected.
	EndpointPort uint16
	// Tap selects VM mode: the tap (made with CreateTap) whose ingress
	// carries the guest's traffic; the guest is egress.Guest. Empty
	// selects namespace mode: the step's processes run in the namespace.
	Tap string
}

// SetupEgress gives the namespace the room's addresses and routes and
// installs the firewall (see egressRules for the exact rules). In
// namespace mode a dummy link EgressLink holds egress.Gateway/24 and
// egress.Gateway6/64 and carries the default routes, so that a connection
// to anywhere reaches the rules instead of failing as unreachable. In VM
// mode the tap holds those addresses and the guest routes through them.
// Call it once per namespace, before the step starts; no thread of the
// caller enters the namespace.
func (n *NS) SetupEgress(e Egress) error {
	if e.ProxyPort == 0 {
		return fmt.Errorf("set up egress in netns %q: no proxy port: start the transparent proxy's listener (NS.Listen) first and pass its port", n.name)
	}
	if e.ProxyPort == e.EndpointPort || e.ProxyPort == 53 || e.EndpointPort == 53 {
		return fmt.Errorf("set up egress in netns %q: proxy port %d, endpoint port %d and the resolver's port 53 must differ", n.name, e.ProxyPort, e.EndpointPort)
	}
	h, err := n.Handle()
	if err != nil {
		return fmt.Errorf("set up egress in netns %q: %w", n.name, err)
	}
	defer h.Close()

	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("set up egress in netns %q: find lo: %w", n.name, err)
	}
	link, err := n.egressLink(h, e.Tap)
	if err != nil {
		return err
	}
	ifaces := egressIfaces{lo: lo.Attrs().Index, loName: "lo"}
	if e.Tap != "" {
		ifaces.tap, ifaces.tapName = link.Attrs().Index, e.Tap
	}
	rs := egressRules(e, ifaces)
	if err := n.installRules(rs); err != nil {
		return fmt.Errorf("set up egress in netns %q: install nftables table %s: %w (the kernel needs nf_tables with the inet family, nat, redirect, conntrack and named counters: CONFIG_NF_TABLES_INET, CONFIG_NFT_NAT, CONFIG_NFT_REDIR, CONFIG_NFT_CT, or load nf_tables, nft_nat, nft_redir and nft_ct)", n.name, EgressTable, err)
	}
	return nil
}

// egressLink makes the link that holds the room's addresses (the dummy in
// namespace mode, the tap in VM mode), addresses it, brings it up and, in
// namespace mode, adds the default routes through it.
func (n *NS) egressLink(h *netlink.Handle, tap string) (netlink.Link, error) {
	name := EgressLink
	if tap == "" {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: EgressLink}, PeerName: EgressPeer}
		if err := h.LinkAdd(v); err != nil {
			return nil, fmt.Errorf("set up egress in netns %q: add veth pair %s/%s: %w (was SetupEgress called twice?)", n.name, EgressLink, EgressPeer, err)
		}
		peer, err := h.LinkByName(EgressPeer)
		if err != nil {
			return nil, fmt.Errorf("set up egress in netns %q: find %s: %w", n.name, EgressPeer, err)
		}
		if err := quietLinkUp(h, peer); err != nil {
			return nil, fmt.Errorf("set up egress in netns %q: %w", n.name, err)
		}
	} else {
		name = tap
	}
	link, err := h.LinkByName(name)
	if err != nil {
		if tap != "" {
			return nil, fmt.Errorf("set up egress in netns %q: find tap %q: %w (create it with CreateTap first)", n.name, tap, err)
		}
		return nil, fmt.Errorf("set up egress in netns %q: find %s: %w", n.name, name, err)
	}
	// No link-local address: its duplicate address detection and the
	// router solicitations after it would be dropped and counted as if
	// the step had sent them.
	if err := h.LinkSetIP6AddrGenMode(link, nl.IN6_ADDR_GEN_MODE_NONE); err != nil {
		return nil, fmt.Errorf("set up egress in netns %q: turn off IPv6 link-local addressing on %s: %w", n.name, name, err)
	}
	for _, p := range []netip.Prefix{
		netip.PrefixFrom(egress.Gateway, egress.GatewayPrefix.Bits()),
		netip.PrefixFrom(egress.Gateway6, egress.GatewayPrefix6.Bits()),
	} {
		a := &netlink.Addr{
			IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())},
			// No duplicate address detection: nothing else is on the
			// link, and a tentative address cannot be bound for a second.
			Flags: unix.IFA_F_NODAD,
		}
		if err := h.AddrAdd(link, a); err != nil {
			return nil, fmt.Errorf("set up egress in netns %q: add address %s to %s: %w", n.name, p, name, err)
		}
	}
	if err := h.LinkSetUp(link); err != nil {
		return nil, fmt.Errorf("set up egress in netns %q: bring %s up: %w", n.name, name, err)
	}
	if tap != "" {
		return link, nil
	}
	for _, dst := range []*net.IPNet{
		{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
		{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
	} {
		r := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK}
		if dst.IP.To4() == nil {
			r.Scope = netlink.SCOPE_UNIVERSE
		}
		if err := h.RouteAdd(r); err != nil {
			return nil, fmt.Errorf("set up egress in netns %q: add default route via %s: %w", n.name, name, err)
		}
	}
	return link, nil
}

// quietLinkUp brings l up without IPv6 link-local addressing, so it sends
// nothing of its own.
func quietLinkUp(h *netlink.Handle, l netlink.Link) error {
	if err := h.LinkSetIP6AddrGenMode(l, nl.IN6_ADDR_GEN_MODE_NONE); err != nil {
		return fmt.Errorf("turn off IPv6 link-local addressing on %s: %w", l.Attrs().Name, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("bring %s up: %w", l.Attrs().Name, err)
	}
	return nil
}

// conn returns an nftables connection whose netlink socket lives in the
// namespace.
func (n *NS) conn() (*nftables.Conn, error) {
	if !n.handle.IsOpen() {
		return nil, fmt.Errorf("netns %q is closed", n.name)
	}
	return nftables.New(nftables.WithNetNSFd(n.Fd()))
}

// installRules sends the whole table in one batch: the kernel applies it
// all or nothing.
func (n *NS) installRules(rs []egressChain) error {
	c, err := n.conn()
	if err != nil {
		return err
	}
	t := c.AddTable(&nftables.Table{Name: EgressTable, Family: nftables.TableFamilyINet})
	for _, name := range []string{counterOutput, counterInput, counterForward} {
		c.AddObj(&nftables.NamedObj{Table: t, Name: name, Type: nftables.ObjTypeCounter, Obj: &expr.Counter{}})
	}
	for _, ch := range rs {
		policy := ch.Policy
		chain := c.AddChain(&nftables.Chain{
			Name:     ch.Name,
			Table:    t,
			Type:     ch.Type,
			Hooknum:  nftables.ChainHookRef(ch.Hook),
			Priority: nftables.ChainPriorityRef(ch.Priority),
			Policy:   &policy,
		})
		for _, r := range ch.Rules {
			c.AddRule(&nftables.Rule{Table: t, Chain: chain, Exprs: r.Exprs})
		}
	}
	return c.Flush()
}

// EgressCounter is what one chain dropped.
type EgressCounter struct {
	Packets, Bytes uint64
}

// EgressCounters are the packets and bytes the firewall dropped, by chain.
type EgressCounters struct {
	Output  EgressCounter // sent by the step (namespace mode) or the room
	Input   EgressCounter // addressed to the room (VM mode: from the guest)
	Forward EgressCounter // routed through the room
}

// EgressCounters reads the drop counters of the namespace's firewall.
func (n *NS) EgressCounters() (EgressCounters, error) {
	var out EgressCounters
	c, err := n.conn()
	if err != nil {
		return out, fmt.Errorf("read egress counters of netns %q: %w", n.name, err)
	}
	objs, err := c.GetNamedObjects(&nftables.Table{Name: EgressTable, Family: nftables.TableFamilyINet})
	if err != nil {
		return out, fmt.Errorf("read egress counters of netns %q: %w (was SetupEgress called?)", n.name, err)
	}
	found := 0
	for _, o := range objs {
		no, ok := o.(*nftables.NamedObj)
		if !ok || no.Type != nftables.ObjTypeCounter {
			continue
		}
		ctr, ok := no.Obj.(*expr.Counter)
		if !ok {
			continue
		}
		v := EgressCounter{Packets: ctr.Packets, Bytes: ctr.Bytes}
		switch no.Name {
		case counterOutput:
			out.Output = v
		case counterInput:
			out.Input = v
		case counterForward:
			out.Forward = v
		default:
			continue
		}
		found++
	}
	if found != 3 {
		return out, fmt.Errorf("read egress counters of netns %q: table %s has %d of its 3 counters: was SetupEgress called?", n.name, EgressTable, found)
	}
	return out, nil
}

// egressIfaces are the interface indexes the rules match on.
type egressIfaces struct {
	lo      int
	loName  string
	tap     int // 0 in namespace mode
	tapName string
}

// egressChain is one base chain of the firewall, as data: SetupEgress
// sends it to the kernel and String renders it in nft syntax.
type egressChain struct {
	Name     string
	Type     nftables.ChainType
	Hook     nftables.ChainHook
	Priority nftables.ChainPriority
	Policy   nftables.ChainPolicy
	Rules    []egressRule
}

// egressRule is one rule: the expressions the kernel runs and the same
// rule in nft syntax.
type egressRule struct {
	Text  string
	Exprs []expr.Any
}

// rule builds a rule from parts, each some expressions and their text.
func rule(parts ...part) egressRule {
	var r egressRule
	var words []string
	for _, p := range parts {
		r.Exprs = append(r.Exprs, p.exprs...)
		words = append(words, p.text)
	}
	r.Text = strings.Join(words, " ")
	return r
}

type part struct {
	text  string
	exprs []expr.Any
}

func cmpEq(data []byte) *expr.Cmp {
	return &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data}
}

func l4proto(name string, proto byte) part {
	return part{"meta l4proto " + name, []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		cmpEq([]byte{proto}),
	}}
}

func nfproto(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		cmpEq([]byte{proto}),
	}
}

// daddr matches the destination address (op "==" or "!=") against a
// prefix; a full-length prefix is a single address.
func daddr(op string, p netip.Prefix) part {
	a := p.Addr()
	fam, off, text := byte(unix.NFPROTO_IPV4), uint32(16), "ip daddr "
	if a.Is6() {
		fam, off, text = unix.NFPROTO_IPV6, 24, "ip6 daddr "
	}
	if op == "!=" {
		text += "!= "
	}
	ln := uint32(a.BitLen() / 8)
	es := append(nfproto(fam), &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: ln})
	if p.Bits() != a.BitLen() {
		mask := net.CIDRMask(p.Bits(), a.BitLen())
		es = append(es, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: ln, Mask: mask, Xor: make([]byte, ln)})
		text += p.String()
	} else {
		text += a.String()
	}
	cop := expr.CmpOpEq
	if op == "!=" {
		cop = expr.CmpOpNeq
	}
	es = append(es, &expr.Cmp{Op: cop, Register: 1, Data: a.AsSlice()})
	return part{text, es}
}

// dport matches a TCP or UDP destination port; an l4proto part must come
// first.
func dport(proto string, port uint16) part {
	return part{fmt.Sprintf("%s dport %d", proto, port), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		cmpEq(binary.BigEndian.AppendUint16(nil, port)),
	}}
}

func ifIndex(key expr.MetaKey, word, name string, index int) part {
	return part{fmt.Sprintf("%s %q", word, name), []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		cmpEq(binary.NativeEndian.AppendUint32(nil, uint32(index))),
	}}
}

func oif(name string, index int) part { return ifIndex(expr.MetaKeyOIF, "oif", name, index) }
func iif(name string, index int) part { return ifIndex(expr.MetaKeyIIF, "iif", name, index) }

func ctEstablished() part {
	return part{"ct state established,related", []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binary.NativeEndian.AppendUint32(nil, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED),
			Xor:  make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}}
}

// ipsDstNAT is IPS_DST_NAT (linux/netfilter/nf_conntrack_common.h).
const ipsDstNAT = 1 << 5

// ctDNAT matches connections whose destination a nat rule rewrote: in this
// table, those the redirect sent to the proxy. The filter output chain
// needs it because its oif is still the route the packet had before the
// redirect moved it to lo.
func ctDNAT() part {
	return part{"ct status dnat", []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binary.NativeEndian.AppendUint32(nil, ipsDstNAT),
			Xor:  make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}}
}

// icmp6Types matches ICMPv6 types lo to hi.
func icmp6Types(text string, lo, hi byte) part {
	return part{"meta l4proto ipv6-icmp icmpv6 type " + text, []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		cmpEq([]byte{unix.IPPROTO_ICMPV6}),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: []byte{lo}, ToData: []byte{hi}},
	}}
}

var (
	accept = part{"accept", []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}}
	drop   = part{"drop", []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}}
)

func countDrop(counter string) part {
	return part{fmt.Sprintf("counter name %q drop", counter), []expr.Any{
		&expr.Objref{Type: unix.NFT_OBJECT_COUNTER, Name: counter},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}}
}

func redirect(port uint16) part {
	return part{fmt.Sprintf("redirect to :%d", port), []expr.Any{
		&expr.Immediate{Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)},
		&expr.Redir{RegisterProtoMin: 1},
	}}
}

func single(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

// egressRules returns the firewall SetupEgress installs for e, with the
// given interface indexes of lo and (VM mode) the tap.
func egressRules(e Egress, ifs egressIfaces) []egressChain {
	gws := []netip.Addr{egress.Gateway, egress.Gateway6}
	tcp, udp := l4proto("tcp", unix.IPPROTO_TCP), l4proto("udp", unix.IPPROTO_UDP)

	// The resolver (TCP) and the HTTP(S)_PROXY endpoint on the gateway
	// are served in the room; they are not connections out.
	var served []egressRule
	for _, gw := range gws {
		served = append(served, rule(tcp, daddr("==", single(gw)), dport("tcp", 53), accept))
		if e.EndpointPort != 0 {
			served = append(served, rule(tcp, daddr("==", single(gw)), dport("tcp", e.EndpointPort), accept))
		}
	}

	natOut := egressChain{Name: "nat_output", Type: nftables.ChainTypeNAT, Hook: *nftables.ChainHookOutput,
		Priority: *nftables.ChainPriorityNATDest, Policy: nftables.ChainPolicyAccept}
	natOut.Rules = append(natOut.Rules, served...)
	natOut.Rules = append(natOut.Rules,
		rule(tcp, daddr("!=", netip.MustParsePrefix("127.0.0.0/8")), redirect(e.ProxyPort)),
		rule(tcp, daddr("!=", single(netip.IPv6Loopback())), redirect(e.ProxyPort)),
	)

	out := egressChain{Name: "output", Type: nftables.ChainTypeFilter, Hook: *nftables.ChainHookOutput,
		Priority: *nftables.ChainPriorityFilter, Policy: nftables.ChainPolicyDrop}
	out.Rules = append(out.Rules,
		rule(oif(ifs.loName, ifs.lo), accept),
		rule(ctEstablished(), accept),
		rule(ctDNAT(), accept),
	)
	for _, gw := range gws {
		out.Rules = append(out.Rules,
			rule(udp, daddr("==", single(gw)), dport("udp", 53), accept),
			rule(tcp, daddr("==", single(gw)), dport("tcp", 53), accept),
		)
	}
	if ifs.tap != 0 {
		out.Rules = append(out.Rules, rule(oif(ifs.tapName, ifs.tap), icmp6Types("nd-neighbor-solicit-nd-neighbor-advert", 135, 136), accept))
	}
	// The kernel's own multicast listener reports (MLD, types 130-132
	// and 143) when a link comes up: not the step's traffic, dropped
	// without counting.
	out.Rules = append(out.Rules,
		rule(icmp6Types("mld-listener-query-mld-listener-done", 130, 132), drop),
		rule(icmp6Types("mld2-listener-report", 143, 143), drop),
		rule(countDrop(counterOutput)),
	)

	in := egressChain{Name: "input", Type: nftables.ChainTypeFilter, Hook: *nftables.ChainHookInput,
		Priority: *nftables.ChainPriorityFilter, Policy: nftables.ChainPolicyDrop}
	in.Rules = append(in.Rules,
		rule(iif(ifs.loName, ifs.lo), accept),
		rule(ctEstablished(), accept),
	)

	chains := []egressChain{natOut}
	if ifs.tap != 0 {
		tap := iif(ifs.tapName, ifs.tap)
		natPre := egressChain{Name: "nat_prerouting", Type: nftables.ChainTypeNAT, Hook: *nftables.ChainHookPrerouting,
			Priority: *nftables.ChainPriorityNATDest, Policy: nftables.ChainPolicyAccept}
		for _, r := range served {
			natPre.Rules = append(natPre.Rules, rule(append([]part{tap}, partsOf(r)...)...))
		}
		natPre.Rules = append(natPre.Rules, rule(tap, tcp, redirect(e.ProxyPort)))
		chains = append(chains, natPre)

		in.Rules = append(in.Rules, rule(tap, tcp, dport("tcp", e.ProxyPort), accept))
		for _, gw := range gws {
			if e.EndpointPort != 0 {
				in.Rules = append(in.Rules, rule(tap, tcp, daddr("==", single(gw)), dport("tcp", e.EndpointPort), accept))
			}
			in.Rules = append(in.Rules,
				rule(tap, udp, daddr("==", single(gw)), dport("udp", 53), accept),
				rule(tap, tcp, daddr("==", single(gw)), dport("tcp", 53), accept),
			)
		}
		in.Rules = append(in.Rules, rule(tap, icmp6Types("nd-neighbor-solicit-nd-neighbor-advert", 135, 136), accept))
	}
	in.Rules = append(in.Rules, rule(countDrop(counterInput)))

	fwd := egressChain{Name: "forward", Type: nftables.ChainTypeFilter, Hook: *nftables.ChainHookForward,
		Priority: *nftables.ChainPriorityFilter, Policy: nftables.ChainPolicyDrop,
		Rules: []egressRule{rule(countDrop(counterForward))}}
	return append(chains, out, in, fwd)
}

// partsOf turns a built rule back into one part, to prefix it.
func partsOf(r egressRule) []part { return []part{{r.Text, r.Exprs}} }

// renderEgressRules renders chains as the nft syntax of the table.
func renderEgressRules(chains []egressChain) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", EgressTable)
	for _, c := range []string{counterOutput, counterInput, counterForward} {
		fmt.Fprintf(&b, "\tcounter %s {\n\t}\n", c)
	}
	for _, ch := range chains {
		hook := map[nftables.ChainHook]string{
			*nftables.ChainHookPrerouting: "prerouting", *nftables.ChainHookInput: "input",
			*nftables.ChainHookForward: "forward", *nftables.ChainHookOutput: "output",
		}[ch.Hook]
		policy := "accept"
		if ch.Policy == nftables.ChainPolicyDrop {
			policy = "drop"
		}
		fmt.Fprintf(&b, "\n\tchain %s {\n\t\ttype %s hook %s priority %d; policy %s;\n", ch.Name, ch.Type, hook, ch.Priority, policy)
		for _, r := range ch.Rules {
			fmt.Fprintf(&b, "\t\t%s\n", r.Text)
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// listEgressChains returns the base chains of the namespace's egress table
// as the kernel holds them: name, hook, priority, type and policy.
func (n *NS) listEgressChains() ([]*nftables.Chain, error) {
	c, err := n.conn()
	if err != nil {
		return nil, fmt.Errorf("list egress chains of netns %q: %w", n.name, err)
	}
	all, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("list egress chains of netns %q: %w", n.name, err)
	}
	var out []*nftables.Chain
	for _, ch := range all {
		if ch.Table != nil && ch.Table.Name == EgressTable {
			out = append(out, ch)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("list egress chains of netns %q: no table %s: was SetupEgress called?", n.name, EgressTable)
	}
	return out, nil
}

// Listen opens a listening socket inside the namespace ("tcp", "tcp4" or
// "tcp6"); the listener serves from the caller's goroutines.
func (n *NS) Listen(network, address string) (net.Listener, error) {
	var l net.Listener
	err := n.Do(func() error {
		var err error
		l, err = net.Listen(network, address)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s %s in netns %q: %w", network, address, n.name, err)
	}
	return l, nil
}

// ListenPacket opens a packet socket inside the namespace ("udp", "udp4"
// or "udp6").
func (n *NS) ListenPacket(network, address string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := n.Do(func() error {
		var err error
		pc, err = net.ListenPacket(network, address)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s %s in netns %q: %w", network, address, n.name, err)
	}
	return pc, nil
}

// ip6tSOOriginalDst is IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/ip6_tables.h).
const ip6tSOOriginalDst = 80

// OriginalDst returns where a redirected TCP connection was going before
// the firewall sent it to the proxy (SO_ORIGINAL_DST, from conntrack). For
// a connection that was not redirected it is the connection's own local
// address.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination: %T is not a TCP connection", c)
	}
	remote, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	rc, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination of %s: %w", c.RemoteAddr(), err)
	}
	var ap netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		if remote.Addr().Unmap().Is4() {
			var sa unix.RawSockaddrInet4
			if serr = getsockopt(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST, unsafePointer(&sa), sizeofInet4); serr == nil {
				ap = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), binary.BigEndian.Uint16((*[2]byte)(unsafePointer(&sa.Port))[:]))
			}
			return
		}
		var sa unix.RawSockaddrInet6
		if serr = getsockopt(int(fd), unix.SOL_IPV6, ip6tSOOriginalDst, unsafePointer(&sa), sizeofInet6); serr == nil {
			ap = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), binary.BigEndian.Uint16((*[2]byte)(unsafePointer(&sa.Port))[:]))
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return netip.AddrPort{}, fmt.Errorf("original destination of %s: conntrack has no entry for it (was it accepted in a namespace SetupEgress set up?): %w", c.RemoteAddr(), err)
		}
		return netip.AddrPort{}, fmt.Errorf("original destination of %s: %w", c.RemoteAddr(), err)
	}
	return ap, nil
}

const (
	sizeofInet4 = unix.SizeofSockaddrInet4
	sizeofInet6 = unix.SizeofSockaddrInet6
)

func unsafePointer[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) }

// getsockopt reads a socket option of size bytes into p.
func getsockopt(fd, level, opt int, p unsafe.Pointer, size uint32) error {
	l := size
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return nil
}
