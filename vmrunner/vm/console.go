// console.go holds what the host does with the guest's serial console:
// its CR LF made LF, its head and tail kept in console.log, the watch
// for a kernel panic and the job's start line, and its tail in a
// StartError.

package vm

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/agentsandbox/agentsandbox/guest"
)

// ConsoleLog is the console's copy in the control directory.
const ConsoleLog = "console.log"

// Markers the backend looks for on the console.
const (
	PanicMarker = "Kernel panic"
)

// ConsoleLogHead and ConsoleLogTail are how much of a guest's console the
// host writes to console.log: the first and the last bytes, with a line
// saying how much was cut between them. A guest can print without end; the
// host's disk must not take it all.
const (
	ConsoleLogHead = 8 << 20
	ConsoleLogTail = 8 << 20
)

// headTail writes the first head bytes to w as they come and keeps the
// last tail bytes after them in a ring, for Close to write after a line
// that counts what was cut.
type headTail struct {
	mu      sync.Mutex
	w       io.WriteCloser
	head    int64
	written int64
	ring    []byte // len tail once used
	tail    int
	pos     int   // next write position in ring
	seen    int64 // bytes past the head
	err     error
}

func newHeadTail(w io.WriteCloser, head, tail int64) *headTail {
	return &headTail{w: w, head: head, tail: int(tail)}
}

func (h *headTail) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(p)
	if room := h.head - h.written; room > 0 {
		k := min(int64(len(p)), room)
		if _, err := h.w.Write(p[:k]); err != nil && h.err == nil {
			h.err = err
		}
		h.written += k
		p = p[k:]
	}
	if len(p) == 0 || h.tail == 0 {
		h.seen += int64(len(p))
		return n, nil
	}
	if h.ring == nil {
		h.ring = make([]byte, h.tail)
	}
	h.seen += int64(len(p))
	if len(p) > h.tail {
		p = p[len(p)-h.tail:]
	}
	k := copy(h.ring[h.pos:], p)
	copy(h.ring, p[k:])
	h.pos = (h.pos + len(p)) % h.tail
	return n, nil // the console must never block on its copy
}

// Close writes the kept tail and closes w.
func (h *headTail) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var kept []byte
	switch {
	case h.seen <= int64(h.tail):
		kept = h.ring[:h.seen]
	default:
		kept = append(append([]byte(nil), h.ring[h.pos:]...), h.ring[:h.pos]...)
		fmt.Fprintf(h.w, "\n[agentsandbox: %d bytes of console output cut here]\n", h.seen-int64(h.tail))
	}
	if _, err := h.w.Write(kept); err != nil && h.err == nil {
		h.err = err
	}
	h.ring = nil
	return errors.Join(h.err, h.w.Close())
}

// crlfWriter turns the serial console's CR LF line ends into LF, so the
// console reads like the job's own output; a lone CR passes through.
type crlfWriter struct {
	mu sync.Mutex
	w  io.Writer
	cr bool // the previous write ended in CR, held back
}

func (c *crlfWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	buf := make([]byte, 0, len(p)+1)
	if c.cr {
		if len(p) == 0 || p[0] != '\n' {
			buf = append(buf, '\r')
		}
		c.cr = false
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '\r' {
			if i+1 == len(p) {
				c.cr = true
				continue
			}
			if p[i+1] == '\n' {
				continue
			}
		}
		buf = append(buf, p[i])
	}
	if _, err := c.w.Write(buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// consoleWatch notices a kernel panic and the job's start line on the
// console, and keeps its last ConsoleTailBytes for errors.
type consoleWatch struct {
	mu       sync.Mutex
	match    []byte // enough of the end to match a marker split across writes
	last     []byte // the console's tail, for errors
	panicked bool
	started  chan struct{} // closed at the job's start line
}

// ConsoleTailBytes is how much of the console an error about a guest that
// did not start shows.
const ConsoleTailBytes = 2048

func newConsoleWatch() *consoleWatch { return &consoleWatch{started: make(chan struct{})} }

func (c *consoleWatch) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	buf := append(c.match, p...)
	if strings.Contains(string(buf), PanicMarker) {
		c.panicked = true
	}
	if strings.Contains(string(buf), guest.ConsoleStartLine) {
		select {
		case <-c.started:
		default:
			close(c.started)
		}
	}
	keep := len(guest.ConsoleStartLine)
	if len(buf) > keep {
		buf = buf[len(buf)-keep:]
	}
	c.match = append(c.match[:0], buf...)
	c.last = append(c.last, p...)
	if len(c.last) > ConsoleTailBytes {
		c.last = append(c.last[:0], c.last[len(c.last)-ConsoleTailBytes:]...)
	}
	return len(p), nil
}

func (c *consoleWatch) state() (panicked, started bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.started:
		started = true
	default:
	}
	return c.panicked, started
}

func (c *consoleWatch) tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.last)
}

// StartError is a VM whose job never started: its hypervisor ended first,
// or the guest did not get there within the start bound. It is an
// infrastructure error, not the job's failure.
type StartError struct {
	Accel       AccelDecision // what the VM ran with, and why
	What        string        // what happened, for the message
	ConsoleTail string
}

func (e *StartError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the VM's job never started: %s (accel %s", e.What, e.Accel.Accel)
	if e.Accel.Reason != "" {
		b.WriteString(": " + e.Accel.Reason)
	}
	b.WriteString(")")
	if e.Accel.Accel == "kvm" {
		b.WriteString(". KVM on this host may not run this guest (nested virtualisation often cannot); " +
			"force software emulation with 'apply --accel tcg' or AGENTSANDBOX_ACCEL=tcg")
	}
	tail := strings.TrimRight(e.ConsoleTail, "\n")
	if tail == "" {
		b.WriteString("; the console was empty")
	} else {
		b.WriteString("; the console's last lines:")
		lines := strings.Split(tail, "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		for _, l := range lines {
			b.WriteString("\n    " + l)
		}
	}
	return b.String()
}
