package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ip6tSOOriginalDst is IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/ip6_tables.h).
const ip6tSOOriginalDst = 80

// originalDst asks the kernel where a redirected (DNAT/REDIRECT)
// connection was going: SO_ORIGINAL_DST for IPv4, IP6T_SO_ORIGINAL_DST
// for IPv6. The answer comes from the connection's conntrack entry.
func originalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination: %T is not a TCP connection", c)
	}
	local, ok := tc.LocalAddr().(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, errors.New("original destination: no local address")
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	v4 := local.IP.To4() != nil
	var buf [unix.SizeofSockaddrInet6]byte
	var serr error
	cerr := rc.Control(func(fd uintptr) {
		level, opt := unix.SOL_IP, unix.SO_ORIGINAL_DST
		if !v4 {
			level, opt = unix.SOL_IPV6, ip6tSOOriginalDst
		}
		size := uint32(len(buf))
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), uintptr(opt),
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		if errno != 0 {
			serr = errno
		}
	})
	if cerr != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", cerr)
	}
	if serr != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: getsockopt SO_ORIGINAL_DST: %w (no conntrack entry: was the connection redirected by the step's firewall?)", serr)
	}
	return parseSockaddr(buf[:])
}

// parseSockaddr reads a sockaddr_in or sockaddr_in6 (family in host
// order, port in network order).
func parseSockaddr(b []byte) (netip.AddrPort, error) {
	family := *(*uint16)(unsafe.Pointer(&b[0]))
	port := binary.BigEndian.Uint16(b[2:4])
	switch family {
	case unix.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), nil
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])).Unmap(), port), nil
	}
	return netip.AddrPort{}, fmt.Errorf("original destination: address family %d", family)
}
