//go:build linux

package agent

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/guest/mux"
)

func TestFindPort(t *testing.T) {
	dir := t.TempDir()
	for port, name := range map[string]string{"vport0p1": "org.other\n", "vport1p3": guest.SessionPort + "\n"} {
		if err := os.MkdirAll(filepath.Join(dir, port), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, port, "name"), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := FindPort(context.Background(), dir, guest.SessionPort, 0)
	if err != nil || got != "/dev/vport1p3" {
		t.Errorf("FindPort = %q, %v; want /dev/vport1p3", got, err)
	}
	_, err = FindPort(context.Background(), dir, "org.missing", 0)
	if err == nil || !strings.Contains(err.Error(), "org.missing") || !strings.Contains(err.Error(), "virtserialport") {
		t.Errorf("missing port: %v, want an error naming the port and the qemu device", err)
	}
}

// hostSide is the host's end of a VM session's port: a mux client on a
// socketpair whose other end the agent serves as it serves the port.
type hostSide struct {
	sess *mux.Session
	done chan bool // serveMux's answer
}

func servePortPair(t *testing.T) *hostSide {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "port")
		conns[i], err = net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	srv := newServer(guest.Job{Version: guest.ProtocolVersion, Step: "vm", Session: true}, io.Discard, false)
	h := &hostSide{sess: mux.Client(conns[0]), done: make(chan bool, 1)}
	go func() { h.done <- srv.serveMux(context.Background(), conns[1], io.Discard) }()
	t.Cleanup(func() { h.sess.Close() })
	return h
}

func (h *hostSide) open(t *testing.T) *client {
	t.Helper()
	st, err := h.sess.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &client{c: st, enc: guest.NewSessionEncoder(st), dec: guest.NewSessionDecoder(st)}
}

// Each mux stream is served exactly as a socket connection: ping, execs
// with output, stdin and signals, several at once.
func TestServeMuxStreams(t *testing.T) {
	h := servePortPair(t)
	c := h.open(t)
	c.send(t, guest.SessionRequest{Op: guest.OpPing})
	var ev guest.SessionEvent
	if err := c.dec.Decode(&ev); err != nil || ev.Type != guest.EventPong {
		t.Fatalf("ping: %+v, %v", ev, err)
	}
	// A command that waits to be signalled, beside others.
	sleeper := h.open(t)
	sleeper.send(t, selfExec("sleep", "100"))
	if err := sleeper.dec.Decode(&ev); err != nil || ev.Type != guest.EventStarted {
		t.Fatalf("start sleep: %+v, %v", ev, err)
	}
	for i := range 2 {
		c := h.open(t)
		c.send(t, selfExec("sh", "-c", "echo hi; echo oops >&2; exit 3"))
		o := c.collect(t)
		if o.exit == nil || o.exit.ExitCode != 3 || o.stdout != "hi\n" || o.stderr != "oops\n" {
			t.Fatalf("exec %d: %+v", i, o)
		}
	}
	in := h.open(t)
	q := selfExec("cat")
	q.Stdin = true
	in.send(t, q)
	in.send(t, guest.SessionRequest{Op: guest.OpStdin, Data: []byte("through the port\n")})
	in.send(t, guest.SessionRequest{Op: guest.OpCloseStdin})
	if o := in.collect(t); o.exit == nil || o.exit.ExitCode != 0 || o.stdout != "through the port\n" {
		t.Fatalf("stdin: %+v", o)
	}
	sleeper.send(t, guest.SessionRequest{Op: guest.OpSignal, Signal: "SIGTERM"})
	if o := sleeper.collect(t); o.exit == nil || o.exit.Signal != "SIGTERM" {
		t.Fatalf("signalled sleep: %+v", o)
	}
	// The host's goaway ends the session.
	if err := h.sess.GoAway(); err != nil {
		t.Fatal(err)
	}
	select {
	case over := <-h.done:
		if !over {
			t.Error("serveMux after goaway: the session goes on, want it over")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serveMux did not return after the host's goaway")
	}
}

// When the host goes away, its commands are killed and the agent waits
// for the next host; on goaway, what still runs is killed and its exit
// reported before the session ends.
func TestServeMuxHostGoneAndGoAway(t *testing.T) {
	h := servePortPair(t)
	c := h.open(t)
	c.send(t, selfExec("sleep", "100"))
	var ev guest.SessionEvent
	if err := c.dec.Decode(&ev); err != nil || ev.Type != guest.EventStarted {
		t.Fatalf("start: %+v, %v", ev, err)
	}
	h.sess.Close()
	select {
	case over := <-h.done:
		if over {
			t.Error("serveMux when the host went away: over, want it to wait for the next host")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serveMux did not return when the host went away")
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(ev.PID) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still runs after its host went away", ev.PID)
		}
		time.Sleep(10 * time.Millisecond)
	}

	h = servePortPair(t)
	c = h.open(t)
	c.send(t, selfExec("sleep", "100"))
	if err := c.dec.Decode(&ev); err != nil || ev.Type != guest.EventStarted {
		t.Fatalf("start: %+v, %v", ev, err)
	}
	if err := h.sess.GoAway(); err != nil {
		t.Fatal(err)
	}
	if o := c.collect(t); o.exit == nil || o.exit.Signal != "SIGKILL" {
		t.Errorf("a command running at goaway: %+v, want its exit by SIGKILL reported", o)
	}
	if over := <-h.done; !over {
		t.Error("serveMux after goaway: not over")
	}
}
