package agent

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/agentsandbox/agentsandbox/guest"
)

// ptmx is the multiplexer of the sandbox's own devpts instance: the jail
// and the VM guest mount devpts (newinstance) at /dev/pts, so a pty made
// here is the sandbox's, never a terminal of the host's.
const ptmx = "/dev/pts/ptmx"

// openPTY makes a new pseudo-terminal of the given size: its master (read
// for the output, written for the input, resized) and its slave (the
// command's stdin, stdout, stderr and controlling terminal).
func openPTY(size guest.PTYSize) (master, slave *os.File, err error) {
	mfd, err := unix.Open(ptmx, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s for a pty (is the sandbox's devpts mounted at /dev/pts?): %w", ptmx, err)
	}
	master = os.NewFile(uintptr(mfd), ptmx)
	defer func() {
		if err != nil {
			master.Close()
		}
	}()
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		return nil, nil, fmt.Errorf("unlock the pty: %w", err)
	}
	// The slave is opened through the master (TIOCGPTPEER), never by a
	// path: it is the master's own peer in this devpts.
	sfd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(mfd), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		return nil, nil, fmt.Errorf("open the pty's slave: %w", errno)
	}
	slave = os.NewFile(uintptr(sfd), "pty slave")
	if err := setPTYSize(master, size); err != nil {
		slave.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

// setPTYSize sets the terminal's size; the command gets SIGWINCH.
func setPTYSize(master *os.File, size guest.PTYSize) error {
	ws := &unix.Winsize{Col: size.Cols, Row: size.Rows}
	if err := unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, ws); err != nil {
		return fmt.Errorf("set the pty's size to %dx%d: %w", size.Cols, size.Rows, err)
	}
	return nil
}
