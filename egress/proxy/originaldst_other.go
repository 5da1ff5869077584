//go:build !linux

package proxy

import (
	"errors"
	"net"
	"net/netip"
)

func originalDst(net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.New("original destination: only Linux can tell where a redirected connection was going; set Config.OriginalDst")
}
