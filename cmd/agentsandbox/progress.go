package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/pipeline"
)

// progress shows apply's event stream: live lines on a terminal, plain
// prefixed lines off one (CI), or JSON lines with --json.
type progress interface {
	Event(pipeline.Event)
	Close()
}

// newProgress picks the display for w.
func newProgress(w io.Writer, jsonLines bool, steps []string) progress {
	if jsonLines {
		return &jsonProgress{enc: json.NewEncoder(w)}
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

func (p *jsonProgress) Event(e pipeline.Event) {
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

func (p *plainProgress) Event(e pipeline.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e.Kind {
	case pipeline.EventPhase:
		fmt.Fprintf(p.w, "==> %s\n", e.Line)
	case pipeline.EventWarning:
		fmt.Fprintf(p.w, "warning: %s\n", e.Line)
	case pipeline.EventStarted:
		fmt.Fprintf(p.w, "[%s] started\n", e.Step)
	case pipeline.EventLog:
		fmt.Fprintf(p.w, "[%s] %s\n", e.Step, e.Line)
	case pipeline.EventFinished:
		fmt.Fprintf(p.w, "[%s] %s\n", e.Step, describeResult(e.Result))
	case pipeline.EventSkipped:
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

func (p *liveProgress) Event(e pipeline.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.lines[e.Step]
	switch e.Kind {
	case pipeline.EventPhase, pipeline.EventWarning:
		p.clear()
		prefix := "==> "
		if e.Kind == pipeline.EventWarning {
			prefix = "warning: "
		}
		fmt.Fprintf(p.w, "%s%s\n", prefix, e.Line)
	case pipeline.EventStarted:
		if l != nil {
			l.state, l.started = "running", e.Time
		}
	case pipeline.EventLog:
		if l != nil {
			l.last = e.Line
		}
	case pipeline.EventFinished:
		if l != nil {
			l.state, l.ended = "finished", e.Time
			if e.Result != nil {
				l.state = string(e.Result.Status)
				if !e.Result.Started.IsZero() {
					l.started = e.Result.Started
				}
			}
		}
	case pipeline.EventSkipped:
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
		if len(last) > 60 {
			last = last[:57] + "..."
		}
		fmt.Fprintf(p.w, "  %-*s  %-10s %7s  %s\n", width, s, truncate(l.state, 40), elapsed, last)
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
