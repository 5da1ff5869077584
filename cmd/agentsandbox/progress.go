package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/vmrunner"
)

// progress shows apply's event stream: live lines on a terminal, plain
// prefixed lines off one (CI), or JSON lines with --json.
//
// Job output is hostile: every string a display prints goes through
// termSafe (or, for JSON, jsonSafe) so that escape sequences, bare carriage
// returns and other controls a job prints cannot move the cursor, erase a
// line, retitle the window or forge a "succeeded" line on the caller's
// terminal. The log blob keeps the raw bytes.
type progress interface {
	Event(engine.Event)
	Close()
}

// newProgress picks the display for w.
func newProgress(w io.Writer, jsonLines bool, steps []string) progress {
	if jsonLines {
		return &jsonProgress{enc: json.NewEncoder(jsonSafe{w})}
	}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return newLiveProgress(w, steps)
	}
	return &plainProgress{w: w}
}

type jsonProgress struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (p *jsonProgress) Event(e engine.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.enc.Encode(e)
}
func (p *jsonProgress) Close() {}

// plainProgress prints one line per event, prefixed with the step name.
type plainProgress struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *plainProgress) Event(e engine.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e = safeEvent(e)
	switch e.Kind {
	case engine.EventPhase:
		fmt.Fprintf(p.w, "==> %s\n", e.Line)
	case engine.EventWarning:
		fmt.Fprintf(p.w, "warning: %s\n", e.Line)
	case engine.EventNote:
		fmt.Fprintf(p.w, "note: %s\n", e.Line)
	case engine.EventStarted:
		fmt.Fprintf(p.w, "[%s] started\n", e.Step)
	case engine.EventLog:
		fmt.Fprintf(p.w, "[%s] %s\n", e.Step, e.Line)
	case engine.EventFinished:
		fmt.Fprintf(p.w, "[%s] %s\n", e.Step, termSafe(describeResult(e.Result)))
	case engine.EventSkipped:
		fmt.Fprintf(p.w, "[%s] skipped: %s\n", e.Step, e.Line)
	}
}
func (p *plainProgress) Close() {}

// describeResult is a one-line account of a finished step.
func describeResult(r *vmrunner.StepResult) string {
	if r == nil {
		return "finished"
	}
	d := r.Finished.Sub(r.Started).Round(time.Millisecond)
	switch {
	case r.Status == vmrunner.StatusSucceeded:
		return fmt.Sprintf("succeeded in %s", d)
	case r.Status == vmrunner.StatusTimeout:
		return fmt.Sprintf("timed out after %s", d)
	case r.Status == vmrunner.StatusOOM:
		return fmt.Sprintf("killed: out of memory after %s", d)
	case r.HasResult && r.Result.Signal != "":
		return fmt.Sprintf("failed: killed by %s after %s", r.Result.Signal, d)
	case r.HasResult && r.Result.Error != "":
		return fmt.Sprintf("failed: %s", r.Result.Error)
	case r.HasResult:
		return fmt.Sprintf("failed: exit status %d after %s", r.Result.ExitCode, d)
	default:
		return fmt.Sprintf("failed: %s", r.Detail)
	}
}

// liveProgress keeps one redrawn line per step on a terminal.
type liveProgress struct {
	mu      sync.Mutex
	w       io.Writer
	order   []string
	lines   map[string]*liveLine
	drawn   int // lines of the live block currently on screen
	stop    chan struct{}
	stopped sync.WaitGroup
}

type liveLine struct {
	state   string
	started time.Time
	ended   time.Time
	last    string
}

func newLiveProgress(w io.Writer, steps []string) *liveProgress {
	p := &liveProgress{w: w, order: steps, lines: map[string]*liveLine{}, stop: make(chan struct{})}
	for _, s := range steps {
		p.lines[s] = &liveLine{state: "waiting"}
	}
	p.stopped.Add(1)
	go func() { // refresh the elapsed times
		defer p.stopped.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.mu.Lock()
				p.redraw()
				p.mu.Unlock()
			}
		}
	}()
	return p
}

func (p *liveProgress) Event(e engine.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.lines[e.Step]
	e = safeEvent(e)
	switch e.Kind {
	case engine.EventPhase, engine.EventWarning, engine.EventNote:
		p.clear()
		prefix := "==> "
		switch e.Kind {
		case engine.EventWarning:
			prefix = "warning: "
		case engine.EventNote:
			prefix = "note: "
		}
		fmt.Fprintf(p.w, "%s%s\n", prefix, e.Line)
	case engine.EventStarted:
		if l != nil {
			l.state, l.started = "running", e.Time
		}
	case engine.EventLog:
		if l != nil {
			l.last = e.Line
		}
	case engine.EventFinished:
		if l != nil {
			l.state, l.ended = "finished", e.Time
			if e.Result != nil {
				l.state = string(e.Result.Status)
				if !e.Result.Started.IsZero() {
					l.started = e.Result.Started
				}
			}
		}
	case engine.EventSkipped:
		if l != nil {
			l.state, l.last = "skipped", e.Line
		}
	}
	p.redraw()
}

// clear moves the cursor to the top of the live block and erases it.
func (p *liveProgress) clear() {
	for ; p.drawn > 0; p.drawn-- {
		fmt.Fprint(p.w, "\x1b[1A\x1b[2K")
	}
}

func (p *liveProgress) redraw() {
	p.clear()
	width := 0
	for _, s := range p.order {
		width = max(width, len(s))
	}
	for _, s := range p.order {
		l := p.lines[s]
		elapsed := ""
		switch {
		case !l.ended.IsZero():
			elapsed = l.ended.Sub(l.started).Round(time.Millisecond).String()
		case !l.started.IsZero():
			elapsed = time.Since(l.started).Round(100 * time.Millisecond).String()
		}
		last := strings.TrimSpace(l.last)
		if r := []rune(last); len(r) > 60 {
			last = string(r[:57]) + "..."
		}
		fmt.Fprintf(p.w, "  %-*s  %-10s %7s  %s\n", width, termSafe(s), termSafe(truncate(l.state, 40)), elapsed, last)
		p.drawn++
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

func (p *liveProgress) Close() {
	close(p.stop)
	p.stopped.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.redraw()
	p.drawn = 0 // leave the final block on screen
}

// safeEvent is e with the strings a display prints made safe for a
// terminal (termSafe). The result is only displayed; its Result is shared.
func safeEvent(e engine.Event) engine.Event {
	e.Step = termSafe(e.Step)
	e.Line = termSafe(e.Line)
	return e
}

// termSafe makes s safe to print on a terminal: it keeps printable text
// and tabs and replaces everything a terminal would act on with a visible
// escape, so a job's output can neither move the cursor nor erase or
// rewrite what is on screen:
//
//   - C0 controls (carriage return, escape, backspace, bell...) and DEL
//     become \xHH, e.g. "\r\x1b[2K" becomes `\x0d\x1b[2K`;
//   - C1 controls U+0080-U+009F (U+009B is CSI on some terminals) and the
//     bidirectional formatting characters (U+202E reverses the text shown
//     after it) become \uHHHH;
//   - bytes that are not valid UTF-8 become \xHH, so none of them can
//     start a sequence a terminal decodes another way.
func termSafe(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || termUnsafe(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case r < 0x80 && termUnsafe(r):
			fmt.Fprintf(&b, "\\x%02x", r)
		case termUnsafe(r):
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// termUnsafe reports whether a terminal acts on r rather than showing it.
// Tabs are kept.
func termUnsafe(r rune) bool {
	switch {
	case r == '\t':
		return false
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	}
	return unicode.Is(unicode.Bidi_Control, r) || r == '\u2028' || r == '\u2029'
}

// jsonSafe writes --json's lines with DEL and the C1 controls escaped as
// \u007f and \u0080-\u009f. encoding/json escapes C0 controls and replaces
// invalid UTF-8 but writes those raw; the escapes decode to the same
// strings. Their bytes (0x7f; 0xc2 0x80-0x9f) can only occur inside JSON
// strings, and each Encode call writes whole lines, so a plain byte
// rewrite is exact.
type jsonSafe struct{ w io.Writer }

func (j jsonSafe) Write(p []byte) (int, error) {
	if !bytes.ContainsFunc(p, func(r rune) bool { return r == 0x7f || r >= 0x80 && r <= 0x9f }) {
		return j.w.Write(p)
	}
	out := make([]byte, 0, len(p)+32)
	for i := 0; i < len(p); {
		r, n := utf8.DecodeRune(p[i:])
		if r == 0x7f || r >= 0x80 && r <= 0x9f {
			out = fmt.Appendf(out, "\\u%04x", r)
		} else {
			out = append(out, p[i:i+n]...)
		}
		i += n
	}
	if _, err := j.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
