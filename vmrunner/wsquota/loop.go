package wsquota

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// LoopControl is the loop driver's control device.
const LoopControl = "/dev/loop-control"

// sysBlock is where the kernel shows each loop device's backing file.
const sysBlock = "/sys/block"

// attachTries bounds the race with other processes taking the free loop
// device between LOOP_CTL_GET_FREE and LOOP_CONFIGURE.
const attachTries = 64

// attachMu makes the attaches of one process take turns: within a
// process (a server opening 50 sandboxes at once) they never race each
// other for the same free device; only other processes can.
var attachMu sync.Mutex

// attach attaches img (named name, absolute) to a free loop device with
// autoclear and direct IO (no second copy of the workspace in the host's
// page cache; the kernel falls back to buffered IO where the backing
// filesystem has no direct IO). It returns the open device: the caller
// holds it until the filesystem on it is mounted.
func attach(img *os.File, name string, before func(string) error) (*os.File, error) {
	ctl, err := os.OpenFile(LoopControl, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", LoopControl, err)
	}
	defer ctl.Close()
	attachMu.Lock()
	defer attachMu.Unlock()
	var lastErr error
	for try := 0; try < attachTries; try++ {
		if try > 0 {
			// Another process took it: let it finish before asking again.
			time.Sleep(time.Duration(try) * time.Millisecond)
		}
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("find a free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		if before != nil {
			if err := before(dev); err != nil {
				return nil, err
			}
		}
		lf, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open loop device: %w (a /dev without loop device nodes, as in some containers, cannot hold a workspace quota)", err)
		}
		err = configure(int(lf.Fd()), int(img.Fd()), name)
		if err == nil {
			return lf, nil
		}
		lf.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("attach %s to %s: %w", name, dev, err)
		}
		lastErr = err // taken meanwhile: ask for another
	}
	return nil, fmt.Errorf("attach %s to a loop device: %d devices were taken before it could: %w", name, attachTries, lastErr)
}

// configure attaches the file at fd to the loop device at lfd in one step
// (LOOP_CONFIGURE, Linux 5.8), or in two on older kernels.
func configure(lfd, fd int, name string) error {
	var info unix.LoopInfo64
	info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
	copy(info.File_name[:len(info.File_name)-1], name)
	err := unix.IoctlLoopConfigure(lfd, &unix.LoopConfig{Fd: uint32(fd), Info: info})
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOTTY) {
		return err
	}
	// Before 5.8. Between the two calls the device has no autoclear: a
	// crash there leaves it attached until gc detaches it.
	if err := unix.IoctlSetInt(lfd, unix.LOOP_SET_FD, fd); err != nil {
		return err
	}
	info.Flags = unix.LO_FLAGS_AUTOCLEAR
	if err := unix.IoctlLoopSetStatus64(lfd, &info); err != nil {
		_ = unix.IoctlSetInt(lfd, unix.LOOP_CLR_FD, 0)
		return err
	}
	return nil
}

// BackingFile is the file attached to the loop device dev (/dev/loopN), as
// the kernel shows it; "" when nothing is attached. A device being
// cleared at that moment (its autoclear after the last close, or another
// sandbox's detach) answers the read with ENODEV or ENXIO: nothing is
// attached to it any more.
func BackingFile(dev string) (string, error) {
	b, err := os.ReadFile(filepath.Join(sysBlock, filepath.Base(dev), "loop", "backing_file"))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENXIO) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read backing file of %s: %w", dev, err)
	}
	return strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), " (deleted)"), nil
}

// Detach detaches the loop device dev if image is still what it serves; a
// device that serves nothing or another file (reused since) is left
// alone. On a device still mounted it only marks it to go at unmount.
func Detach(dev, image string) error {
	if !strings.HasPrefix(dev, "/dev/loop") {
		return fmt.Errorf("detach %s: not a loop device", dev)
	}
	back, err := BackingFile(dev)
	if err != nil || back == "" || back != image {
		return err
	}
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("detach %s: %w", dev, err)
	}
	err = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
	f.Close() // our own reference must not hold the device
	if err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("detach %s from %s: %w", image, dev, err)
	}
	// The kernel lets go of the image when the device's last user does:
	// right after an unmount that can still be a moment away (the
	// filesystem's final release, the autoclear of a device just closed).
	// Wait for it, so that what Unmount and gc report gone is gone.
	for deadline := time.Now().Add(detachWait); ; time.Sleep(10 * time.Millisecond) {
		back, err := BackingFile(dev)
		if err != nil || back != image {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("detach %s from %s: still in use after %v", image, dev, detachWait)
		}
	}
}

// detachWait bounds how long Detach waits for the kernel to let go.
const detachWait = 5 * time.Second
