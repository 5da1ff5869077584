//go:build linux

package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/guest/mux"
)

// VirtioPortsDir is where the kernel lists virtio-serial ports, each
// vportNpM with a name file; the device is /dev/vportNpM (devtmpfs makes
// it; a VM guest may have no udev for /dev/virtio-ports/NAME).
const VirtioPortsDir = "/sys/class/virtio-ports"

// portWait bounds how long the agent waits for its port to appear (the
// virtio_console driver probes it after the module is loaded).
const portWait = 30 * time.Second

// hostPoll is how often the agent looks for the host on a port it is not
// connected to: the port reads end-of-file until the host connects.
const hostPoll = 20 * time.Millisecond

// RunVM runs controlDir's job the way a VM's agent does: a session job
// (Session set) is served on the virtio-serial port guest.SessionPort
// until the host's goaway or ctx ends (RunSession with Port); any other
// job is RunJob's.
func RunVM(ctx context.Context, controlDir string, console io.Writer) (guest.Result, error) {
	if job, err := ReadJob(controlDir); err == nil && job.Session {
		return RunSession(ctx, controlDir, console, SessionOptions{Port: guest.SessionPort, PTY: true})
	}
	return RunJob(ctx, controlDir, console)
}

// FindPort finds the device of the virtio-serial port called name under
// dir (VirtioPortsDir), waiting up to wait for it to appear.
func FindPort(ctx context.Context, dir, name string, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(dir, e.Name(), "name"))
			if err != nil || len(b) > 256 {
				continue
			}
			if string(bytes.TrimSpace(b)) == name && strings.HasPrefix(e.Name(), "vport") {
				return filepath.Join("/dev", e.Name()), nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("find the virtio-serial port %q: no port of that name in %s after %v (does the VM's qemu have -device virtserialport,name=%s, and the guest the virtio_console driver?)", name, dir, wait, name)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// servePort serves the session protocol on the virtio-serial port called
// name: one guest/mux server session per host connection, each of its
// streams served as one connection of the socket. When the host goes
// away (the port reads EOF) the streams end, which kills their commands,
// and the agent waits for the host again. It returns at the host's goaway
// or when ctx is done.
func (s *server) servePort(ctx context.Context, name string, console io.Writer, ready func()) error {
	dev, err := FindPort(ctx, VirtioPortsDir, name, portWait)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	readied := false
	for {
		f, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("open the session port %s: %w", dev, err)
		}
		if !readied && ready != nil {
			ready()
		}
		readied = true
		first, err := waitHost(ctx, f)
		if err != nil {
			f.Close()
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read the session port %s: %w", dev, err)
		}
		if s.serveMux(ctx, &portConn{r: io.MultiReader(bytes.NewReader(first), f), f: f}, console) {
			return nil
		}
		// The host went away (or broke the protocol): its streams have
		// ended, and with them their commands; serve the next host.
	}
}

// serveMux serves one host connection: a guest/mux server session on
// conn whose every stream is one connection of the session protocol. It
// returns true when the session is over (the host's goaway, or ctx done),
// after killing what still runs and reporting the exits to the host;
// false when the host went away.
func (s *server) serveMux(ctx context.Context, conn io.ReadWriteCloser, console io.Writer) bool {
	sess := mux.Server(conn)
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	var acceptErr error
	for {
		st, err := sess.Accept()
		if err != nil {
			acceptErr = err
			break
		}
		s.serveConn(st)
	}
	stop()
	if errors.Is(acceptErr, mux.ErrGoAway) || ctx.Err() != nil {
		s.shutdown()
		sess.Close()
		return true
	}
	sess.Close()
	if err := sess.Err(); !errors.Is(err, io.EOF) {
		// Not the host going away: say why, and do not spin on a
		// connection that keeps failing.
		fmt.Fprintf(console, "%s session port: %v\n", guest.ConsoleErrorLine, err)
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// waitHost waits until the host is connected to the port and has sent
// something, and returns the first bytes. A port the host is not
// connected to reads EOF at once, so it is polled.
func waitHost(ctx context.Context, f *os.File) ([]byte, error) {
	buf := make([]byte, mux.HeaderSize)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			return buf[:n], nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(hostPoll):
		}
	}
}

// portConn is the port as the mux reads it: the bytes waitHost took
// first, then the device.
type portConn struct {
	r io.Reader
	f *os.File
}

func (c *portConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *portConn) Write(p []byte) (int, error) { return c.f.Write(p) }
func (c *portConn) Close() error                { return c.f.Close() }
