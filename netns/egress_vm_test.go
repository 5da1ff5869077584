package netns

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// guestMAC is the made-up guest's Ethernet address.
var guestMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}

// fakeGuest plays a VM guest on the far side of a tap: it writes the
// Ethernet frames a guest would send and reads what the room sends back.
type fakeGuest struct {
	t      *testing.T
	f      *os.File
	tapMAC net.HardwareAddr
}

// openTap attaches to the persistent tap name inside ns, as qemu would.
func openTap(t *testing.T, ns *NS, name string) *os.File {
	t.Helper()
	var fd int
	err := ns.Do(func() error {
		var err error
		fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			unix.Close(fd)
			return err
		}
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF %s: %w", name, err)
		}
		return unix.SetNonblock(fd, true)
	})
	if err != nil {
		t.Fatalf("open tap %s: %v", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	t.Cleanup(func() { f.Close() })
	return f
}

func checksum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// guest6 is the made-up guest's IPv6 address on the room's link.
var guest6 = netip.MustParseAddr("fd61:7362::2")

// send writes an IP packet of protocol proto with payload l4 (whose
// checksum, at csumOff, send fills in; -1 for none) from the guest to dst,
// from egress.Guest or, to an IPv6 address, from guest6.
func (g *fakeGuest) send(proto byte, dst netip.Addr, l4 []byte, csumOff int) {
	g.t.Helper()
	src := egress.Guest
	if dst.Is6() {
		src = guest6
	}
	if csumOff >= 0 {
		var sum uint32
		if proto != unix.IPPROTO_ICMP { // ICMPv4 has no pseudo-header
			pseudo := append(src.AsSlice(), dst.AsSlice()...)
			pseudo = binary.BigEndian.AppendUint32(pseudo, uint32(len(l4)))
			pseudo = append(pseudo, 0, 0, 0, proto)
			for i := 0; i < len(pseudo); i += 2 {
				sum += uint32(binary.BigEndian.Uint16(pseudo[i:]))
			}
		}
		binary.BigEndian.PutUint16(l4[csumOff:], checksum(l4, sum))
	}
	var ip []byte
	etherType := []byte{0x08, 0x00}
	if dst.Is6() {
		ip = make([]byte, 40)
		ip[0], ip[6], ip[7] = 0x60, proto, 64
		if proto == unix.IPPROTO_ICMPV6 {
			ip[7] = 255 // neighbour discovery requires it
		}
		binary.BigEndian.PutUint16(ip[4:], uint16(len(l4)))
		copy(ip[8:], src.AsSlice())
		copy(ip[24:], dst.AsSlice())
		etherType = []byte{0x86, 0xdd}
	} else {
		ip = make([]byte, 20)
		ip[0], ip[8], ip[9] = 0x45, 64, proto
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
		copy(ip[12:], src.AsSlice())
		copy(ip[16:], dst.AsSlice())
		binary.BigEndian.PutUint16(ip[10:], checksum(ip, 0))
	}
	frame := append(append(append(append([]byte{}, g.tapMAC...), guestMAC...), etherType...), ip...)
	frame = append(frame, l4...)
	if _, err := g.f.Write(frame); err != nil {
		g.t.Fatalf("write a frame to the tap: %v", err)
	}
}

func tcpHeader(sport, dport uint16, seq, ack uint32, flags byte) []byte {
	h := make([]byte, 20)
	binary.BigEndian.PutUint16(h[0:], sport)
	binary.BigEndian.PutUint16(h[2:], dport)
	binary.BigEndian.PutUint32(h[4:], seq)
	binary.BigEndian.PutUint32(h[8:], ack)
	h[12], h[13] = 5<<4, flags
	binary.BigEndian.PutUint16(h[14:], 65535)
	return h
}

func udpPacket(sport, dport uint16, payload []byte) []byte {
	h := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(h[0:], sport)
	binary.BigEndian.PutUint16(h[2:], dport)
	binary.BigEndian.PutUint16(h[4:], uint16(8+len(payload)))
	return append(h, payload...)
}

// awaitTCP reads frames for up to within until a TCP segment from src to
// the guest's port dport arrives, and returns its sequence number and
// flags.
func (g *fakeGuest) awaitTCP(src netip.AddrPort, dport uint16, within time.Duration) (uint32, byte, error) {
	g.t.Helper()
	deadline := time.Now().Add(within)
	buf := make([]byte, 2048)
	for {
		if err := g.f.SetReadDeadline(deadline); err != nil {
			return 0, 0, err
		}
		n, err := g.f.Read(buf)
		if err != nil {
			return 0, 0, fmt.Errorf("no TCP segment from %s to the guest's port %d: %w", src, dport, err)
		}
		fr := buf[:n]
		if n < 14+20+20 || !bytes.Equal(fr[0:6], guestMAC) {
			continue
		}
		ip := fr[14:]
		var tcp []byte
		switch binary.BigEndian.Uint16(fr[12:]) {
		case 0x0800:
			if ip[9] != unix.IPPROTO_TCP || netip.AddrFrom4([4]byte(ip[12:16])) != src.Addr() {
				continue
			}
			tcp = ip[int(ip[0]&0xf)*4:]
		case 0x86dd:
			if len(ip) < 40+20 || ip[6] != unix.IPPROTO_TCP || netip.AddrFrom16([16]byte(ip[8:24])) != src.Addr() {
				continue
			}
			tcp = ip[40:]
		default:
			continue
		}
		if binary.BigEndian.Uint16(tcp[0:]) != src.Port() || binary.BigEndian.Uint16(tcp[2:]) != dport {
			continue
		}
		return binary.BigEndian.Uint32(tcp[4:]), tcp[13], nil
	}
}

// awaitICMPv6 reads frames until an ICMPv6 message of type typ from src
// arrives.
func (g *fakeGuest) awaitICMPv6(src netip.Addr, typ byte, within time.Duration) error {
	deadline := time.Now().Add(within)
	buf := make([]byte, 2048)
	for {
		if err := g.f.SetReadDeadline(deadline); err != nil {
			return err
		}
		n, err := g.f.Read(buf)
		if err != nil {
			return err
		}
		fr := buf[:n]
		if n < 14+40+4 || binary.BigEndian.Uint16(fr[12:]) != 0x86dd {
			continue
		}
		ip := fr[14:]
		if ip[6] == unix.IPPROTO_ICMPV6 && netip.AddrFrom16([16]byte(ip[8:24])) == src && ip[40] == typ {
			return nil
		}
	}
}

// TestEgressVMModePackets drives the tap path with hand-made frames: a
// guest's TCP connection to the internet ends at the proxy, which learns
// its original destination; DNS to the gateway reaches the resolver's
// socket; anything else the guest sends the room is dropped and counted.
func TestEgressVMModePackets(t *testing.T) {
	testtier.Root(t)
	ns := create(t)
	tap := "asbv" + fmt.Sprintf("%x", sha256Sum(ns.Name())[:4])
	link, err := ns.CreateTap(Tap{Name: tap})
	if err != nil {
		t.Fatal(err)
	}
	proxy := listen(t, ns, "tcp", ":0")
	if err := ns.SetupEgress(Egress{ProxyPort: port(proxy), Tap: tap}); err != nil {
		t.Fatal(err)
	}
	resolver, err := ns.ListenPacket("udp4", netip.AddrPortFrom(egress.Gateway, 53).String())
	if err != nil {
		t.Fatal(err)
	}
	defer resolver.Close()

	h, err := ns.Handle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	// The room knows the guest's Ethernet address, so no ARP exchange is
	// needed.
	for _, a := range []netip.Addr{egress.Guest, guest6} {
		fam := unix.AF_INET
		if a.Is6() {
			fam = unix.AF_INET6
		}
		if err := h.NeighAdd(&netlink.Neigh{LinkIndex: link.Attrs().Index, Family: fam, State: netlink.NUD_PERMANENT,
			IP: a.AsSlice(), HardwareAddr: guestMAC}); err != nil {
			t.Fatal(err)
		}
	}
	f := openTap(t, ns, tap)
	l, err := h.LinkByName(tap)
	if err != nil {
		t.Fatal(err)
	}
	g := &fakeGuest{t: t, f: f, tapMAC: l.Attrs().HardwareAddr}

	// A TCP handshake with the internet, over IPv4 and IPv6, is answered
	// by the proxy as if by the address the guest dialled.
	for i, dst := range []netip.AddrPort{netip.MustParseAddrPort("203.0.113.10:443"), netip.MustParseAddrPort("[2001:db8::10]:80")} {
		sport, isn := uint16(40000+i), uint32(1000)
		// Like a guest's TCP stack, send the SYN again if no answer comes
		// within a second: the first can arrive before the tap's link
		// is fully up.
		var seq uint32
		var flags byte
		var err error
		for try := 0; try < 5; try++ {
			g.send(unix.IPPROTO_TCP, dst.Addr(), tcpHeader(sport, dst.Port(), isn, 0, 0x02), 16) // SYN
			if seq, flags, err = g.awaitTCP(dst, sport, time.Second); err == nil {
				break
			}
			t.Logf("SYN to %s try %d: %v", dst, try+1, err)
		}
		if err != nil {
			t.Fatal(err)
		}
		if flags&0x12 != 0x12 {
			t.Fatalf("answer to the SYN to %s has flags %#x, want SYN+ACK", dst, flags)
		}
		g.send(unix.IPPROTO_TCP, dst.Addr(), tcpHeader(sport, dst.Port(), isn+1, seq+1, 0x10), 16) // ACK
		c := acceptOne(t, proxy)
		if got, err := OriginalDst(c); err != nil || got != dst {
			t.Errorf("OriginalDst of the guest's connection = %s, %v; want %s", got, err, dst)
		}
		from, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		guest := egress.Guest
		if dst.Addr().Is6() {
			guest = guest6
		}
		if from.Addr().Unmap() != guest || from.Port() != sport {
			t.Errorf("proxy sees the connection to %s from %s, want %s port %d", dst, c.RemoteAddr(), guest, sport)
		}
		c.Close()
	}

	// Neighbour discovery works on the tap: a neighbour solicitation for
	// the gateway is answered with an advertisement.
	ns6 := []byte{135, 0, 0, 0, 0, 0, 0, 0}
	ns6 = append(ns6, egress.Gateway6.AsSlice()...)
	ns6 = append(append(ns6, 1, 1), guestMAC...) // source link-layer address option
	g.send(unix.IPPROTO_ICMPV6, egress.Gateway6, ns6, 2)
	if err := g.awaitICMPv6(egress.Gateway6, 136, 5*time.Second); err != nil {
		t.Errorf("no neighbour advertisement for %s: %v", egress.Gateway6, err)
	}

	// DNS to the gateway reaches the resolver.
	g.send(unix.IPPROTO_UDP, egress.Gateway, udpPacket(40001, 53, []byte("query")), -1)
	resolver.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, from, err := resolver.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "query" || from.String() != netip.AddrPortFrom(egress.Guest, 40001).String() {
		t.Errorf("resolver read %q from %v, %v", buf[:n], from, err)
	}

	// Other UDP and ICMP echoes to the room are dropped on input.
	before := counters(t, ns)
	g.send(unix.IPPROTO_UDP, egress.Gateway, udpPacket(40002, 123, []byte("ntp")), -1)
	g.send(unix.IPPROTO_ICMP, egress.Gateway, []byte{8, 0, 0, 0, 0, 7, 0, 1, 'x'}, 2)
	g.send(unix.IPPROTO_ICMPV6, egress.Gateway6, []byte{128, 0, 0, 0, 0, 7, 0, 1, 'x'}, 2)
	var after EgressCounters
	for i := 0; i < 50; i++ { // frames written to a tap are received asynchronously
		if after = counters(t, ns); after.Input.Packets >= before.Input.Packets+3 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if after.Input.Packets != before.Input.Packets+3 {
		t.Errorf("input drop counter %+v -> %+v, want three more packets (UDP to port 123, ICMP and ICMPv6 echo)", before.Input, after.Input)
	}
	if err := g.awaitICMPv6(egress.Gateway6, 129, 300*time.Millisecond); err == nil {
		t.Error("the room answered the guest's ICMPv6 echo")
	}
	if after.Output != before.Output {
		t.Errorf("output drop counter moved: %+v -> %+v", before.Output, after.Output)
	}
	resolver.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, _, err := resolver.ReadFrom(buf); err == nil {
		t.Errorf("resolver got %q, which the firewall should have dropped", buf[:n])
	}
}
