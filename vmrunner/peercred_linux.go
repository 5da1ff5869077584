package vmrunner

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// DialPeer connects to the unix socket at path and returns the connection
// with the credentials (pid, uid, gid) of the process that made the socket
// listen (SO_PEERCRED), for the caller to check before it trusts what it
// reads: a session socket must be served by the sandbox's own agent or
// hypervisor, not by whatever a job managed to put there.
func DialPeer(path string) (*net.UnixConn, *unix.Ucred, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	raw, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		c.Close()
		return nil, nil, fmt.Errorf("read the socket's peer credentials: %w", errors.Join(err, cerr))
	}
	return c, cred, nil
}
