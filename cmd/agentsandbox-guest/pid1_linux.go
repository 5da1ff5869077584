//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentsandbox/agentsandbox/guest"
)

// ModulesFile lists the kernel modules an initramfs-only guest loads before
// it mounts its shares: one path per line, in load order; blank lines and
// lines starting with # are ignored.
const ModulesFile = "/etc/agentsandbox/modules"

// ninepMsize is the 9p message size asked for; the kernel lowers it to what
// the transport supports.
const ninepMsize = 262144

// pid1Main is the init of an initramfs-only guest. It never returns: it
// powers the machine off after the job, and after any set-up error, which it
// prints first.
func pid1Main(args []string) {
	var console io.Writer = os.Stdout
	defer func() {
		// A panic must not become a kernel panic without a message.
		if r := recover(); r != nil {
			fmt.Fprintf(console, "%s panic: %v\n", guest.ConsoleErrorLine, r)
		}
		powerOff(console)
	}()
	controlDir, err := controlDirFromArgs(args)
	if err != nil {
		fmt.Fprintf(console, "%s %v\n", guest.ConsoleErrorLine, err)
		return
	}
	if err := mountBase(); err != nil {
		fmt.Fprintf(console, "%s %v\n", guest.ConsoleErrorLine, err)
		return
	}
	// The kernel gives init /dev/console as fds 0-2 when the initramfs
	// has that node; without it they are closed, so open it now that
	// devtmpfs is mounted.
	var st unix.Stat_t
	if unix.Fstat(1, &st) != nil {
		if c, err := os.OpenFile("/dev/console", os.O_WRONLY|unix.O_NOCTTY, 0); err == nil {
			console = c
		}
	}
	if err := loadModules(ModulesFile); err != nil {
		fmt.Fprintf(console, "%s %v\n", guest.ConsoleErrorLine, err)
		return
	}
	for _, s := range []struct{ tag, dir string }{
		{guest.ControlTag, guest.ControlMount},
		{guest.WorkspaceTag, guest.WorkspaceMount},
	} {
		if err := mount9p(s.tag, s.dir); err != nil {
			fmt.Fprintf(console, "%s %v\n", guest.ConsoleErrorLine, err)
			return
		}
	}
	if controlDir != guest.ControlMount {
		fmt.Fprintf(console, "agentsandbox-guest: control directory %s (share %s is mounted at %s)\n", controlDir, guest.ControlTag, guest.ControlMount)
	}
	if _, err := runWithMarkers(context.Background(), controlDir, console); err != nil {
		fmt.Fprintf(console, "%s %v\n", guest.ConsoleErrorLine, err)
	}
}

// mountBase mounts the pseudo file systems an init needs.
func mountBase() error {
	for _, m := range []struct {
		src, dir, fstype string
		flags            uintptr
		data             string
	}{
		{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
		// The guest's own ptys (a session exec with a pty, guest/agent/pty.go).
		{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"},
		{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
	} {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			return fmt.Errorf("mount %s: %w", m.dir, err)
		}
		if err := unix.Mount(m.src, m.dir, m.fstype, m.flags, m.data); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.dir, err)
		}
	}
	return nil
}

// parseModules reads a modules list: one path per line, in load order.
func parseModules(r io.Reader) ([]string, error) {
	var mods []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		mods = append(mods, line)
	}
	return mods, sc.Err()
}

// loadModules loads the modules listed in path, in order. A missing list
// means there is nothing to load (a kernel with everything built in); a
// module that is already loaded is fine.
func loadModules(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load kernel modules: %w", err)
	}
	defer f.Close()
	mods, err := parseModules(f)
	if err != nil {
		return fmt.Errorf("load kernel modules: read %s: %w", path, err)
	}
	for _, m := range mods {
		if err := loadModule(m); err != nil {
			return err
		}
	}
	return nil
}

func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("load kernel module: %w", err)
	}
	defer f.Close()
	flags := 0
	for _, ext := range []string{".xz", ".zst", ".gz"} {
		if strings.HasSuffix(path, ext) {
			flags |= unix.MODULE_INIT_COMPRESSED_FILE
		}
	}
	if err := unix.FinitModule(int(f.Fd()), "", flags); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("load kernel module %s: %w", path, err)
	}
	return nil
}

// mount9p mounts the 9p share tagged tag on dir.
func mount9p(tag, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("mount share %s: %w", tag, err)
	}
	opts := fmt.Sprintf("trans=virtio,version=9p2000.L,msize=%d", ninepMsize)
	if err := unix.Mount(tag, dir, "9p", 0, opts); err != nil {
		return fmt.Errorf("mount 9p share %s on %s (%s): %w (is the share passed to the VM and the 9p modules loaded?)", tag, dir, opts, err)
	}
	return nil
}

// powerOff syncs and powers the machine off. If the kernel refuses, it
// halts; if that fails too, it says so and returns, and the caller's exit
// (PID 1 exiting) makes the kernel panic, which the runner sees as the end.
func powerOff(console io.Writer) {
	unix.Sync()
	err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	fmt.Fprintf(console, "%s power off: %v\n", guest.ConsoleErrorLine, err)
	err = unix.Reboot(unix.LINUX_REBOOT_CMD_HALT)
	fmt.Fprintf(console, "%s halt: %v\n", guest.ConsoleErrorLine, err)
	time.Sleep(time.Second)
	os.Exit(1)
}
