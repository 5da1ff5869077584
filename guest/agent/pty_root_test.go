package agent

import (
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// TestSessionPTY: a command run with a pty has a /dev/pts terminal of the
// size asked for, a resize changes it, its input is echoed, and all its
// output (stderr too) comes as stdout.
func TestSessionPTY(t *testing.T) {
	testtier.Root(t) // the host's /dev/pts/ptmx is root's only (mode 0); a sandbox's devpts is 0666
	dir := serve(t, SessionOptions{PTY: true})
	c := dial(t, dir)
	q := selfExec("sh", "-c", `tty; stty size; echo to-stderr >&2; read x; stty size; echo "got:$x"`)
	q.PTY = &guest.PTYSize{Cols: 80, Rows: 24}
	c.send(t, q)
	var out strings.Builder
	for !strings.Contains(out.String(), "to-stderr") {
		var ev guest.SessionEvent
		if err := c.dec.Decode(&ev); err != nil {
			t.Fatalf("decode event: %v (output so far %q)", err, out.String())
		}
		switch ev.Type {
		case guest.EventStdout:
			out.Write(ev.Data)
		case guest.EventStderr:
			t.Fatalf("a stderr event from a command on a pty: %q", ev.Data)
		case guest.EventExit, guest.EventError:
			t.Fatalf("the command ended before its input: %+v, output %q", ev, out.String())
		}
	}
	c.send(t, guest.SessionRequest{Op: guest.OpResize, PTY: &guest.PTYSize{Cols: 100, Rows: 30}})
	c.send(t, guest.SessionRequest{Op: guest.OpStdin, Data: []byte("hello\n")})
	o := c.collect(t)
	all := out.String() + o.stdout
	if o.exit == nil || o.exit.ExitCode != 0 || o.stderr != "" {
		t.Fatalf("outcome %+v, output %q", o, all)
	}
	for _, want := range []string{"/dev/pts/", "24 80\r\n", "to-stderr\r\n", "hello\r\n", "30 100\r\n", "got:hello\r\n"} {
		if !strings.Contains(all, want) {
			t.Errorf("the pty's output has no %q: %q", want, all)
		}
	}
}

// TestSessionPTYRefused: an agent whose sandbox has no devpts of its own
// (the fake backend's, on the host) refuses an exec with a pty.
func TestSessionPTYRefused(t *testing.T) {
	dir := serve(t, SessionOptions{})
	q := selfExec("tty")
	q.PTY = &guest.PTYSize{Cols: 80, Rows: 24}
	o := run1(t, dir, q)
	if o.exit != nil || !strings.Contains(o.err, "no devpts of its own") {
		t.Fatalf("an exec with a pty on an agent without PTY: %+v", o)
	}
}
