package jailinit

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// keepCaps are all the jail's init keeps: enough to start the job as its
// own uid and gid (setgroups, setgid, setuid) and to signal its process
// group. The job, running as a non-zero uid, loses even these at setuid.
var keepCaps = []int{unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_KILL}

// threads applies per-thread system calls either to every thread of the
// process (all, through syscall.AllThreadsSyscall) or to the calling,
// locked thread only.
type threads struct{ all bool }

// allThreadsWork reports whether syscall.AllThreadsSyscall is usable: it is
// not in a binary that uses cgo.
func allThreadsWork() bool {
	_, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_GET_NO_NEW_PRIVS, 0, 0)
	return e == 0
}

func (t threads) syscall(trap, a1, a2, a3 uintptr) error {
	var e syscall.Errno
	if t.all {
		_, _, e = syscall.AllThreadsSyscall(trap, a1, a2, a3)
	} else {
		_, _, e = syscall.RawSyscall(trap, a1, a2, a3)
	}
	if e != 0 {
		return e
	}
	return nil
}

func (t threads) setns(fd, nstype int) error {
	return t.syscall(unix.SYS_SETNS, uintptr(fd), uintptr(nstype), 0)
}

// unshareCgroup makes a cgroup namespace on this thread and, with all, moves
// every other thread into that same namespace.
func (t threads) unshareCgroup() error {
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return err
	}
	if !t.all {
		return nil
	}
	// The host's /proc is still mounted: thread-self names this thread
	// there (gettid would give its id in the new pid namespace).
	f, err := os.Open("/proc/thread-self/ns/cgroup")
	if err != nil {
		return err
	}
	defer f.Close()
	return t.setns(int(f.Fd()), unix.CLONE_NEWCGROUP)
}

// joinSessionKeyring gives the threads a new session keyring, so that the
// job does not inherit the caller's. The session keyring belongs to a
// thread's credentials, and AllThreadsSyscall needs every thread to get the
// same result, so rather than an anonymous keyring per thread
// (KEYCTL_JOIN_SESSION_KEYRING with NULL) this thread makes one keyring
// with a random name in its thread keyring, lets the keyring's owner (root:
// the init's threads) search it, and every thread joins it by name. The
// job, running as another uid, cannot find it, and seccomp refuses it the
// keyctl calls anyway.
func (t threads) joinSessionKeyring() error {
	var r [16]byte
	if _, err := rand.Read(r[:]); err != nil {
		return err
	}
	desc := "_ses.agentsandbox." + hex.EncodeToString(r[:])
	id, err := unix.AddKey("keyring", desc, nil, unix.KEY_SPEC_THREAD_KEYRING)
	if err != nil {
		return fmt.Errorf("create keyring: %w", err)
	}
	// KEY_POS_ALL | KEY_USR_VIEW | KEY_USR_READ | KEY_USR_SEARCH
	// (linux/keyctl.h; x/sys/unix does not name them).
	const perm = 0x3f000000 | 0x00010000 | 0x00020000 | 0x00080000
	if err := unix.KeyctlSetperm(id, perm); err != nil {
		return fmt.Errorf("set keyring permissions: %w", err)
	}
	name, err := unix.BytePtrFromString(desc)
	if err != nil {
		return err
	}
	err = t.syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, uintptr(unsafe.Pointer(name)), 0)
	runtime.KeepAlive(name)
	if err != nil {
		return err
	}
	if _, err := unix.KeyctlInt(unix.KEYCTL_UNLINK, id, unix.KEY_SPEC_THREAD_KEYRING, 0, 0); err != nil {
		return fmt.Errorf("unlink keyring from the thread keyring: %w", err)
	}
	return nil
}

// dropPrivileges reduces the threads to keepCaps in every capability set
// and sets no_new_privs.
func (t threads) dropPrivileges() error {
	keep := map[int]bool{}
	var mask [2]uint32
	for _, c := range keepCaps {
		keep[c] = true
		mask[c/32] |= 1 << (uint(c) % 32)
	}
	if err := t.syscall(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	for c := 0; c <= 63; c++ {
		if keep[c] {
			continue
		}
		err := t.syscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the kernel's last capability
		}
		if err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Effective: mask[0], Permitted: mask[0]},
		{Effective: mask[1], Permitted: mask[1]},
	}
	err := t.syscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	runtime.KeepAlive(&hdr)
	runtime.KeepAlive(&data)
	if err != nil {
		return fmt.Errorf("set capabilities: %w", err)
	}
	if err := t.syscall(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	return nil
}
