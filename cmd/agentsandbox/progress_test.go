package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/vmrunner"
)

func progressEvents() []engine.Event {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return []engine.Event{
		{Time: t0, Kind: engine.EventPhase, Line: "run 2 steps"},
		{Time: t0, Kind: engine.EventStarted, Step: "train"},
		{Time: t0, Kind: engine.EventLog, Step: "train", Line: "epoch 1"},
		{Time: t0, Kind: engine.EventFinished, Step: "train", Result: &vmrunner.StepResult{
			Status: vmrunner.StatusFailed, HasResult: true, Result: guest.Result{ExitCode: 3},
			Started: t0, Finished: t0.Add(1500 * time.Millisecond)}},
		{Time: t0, Kind: engine.EventSkipped, Step: "eval", Line: `needs "train", which did not succeed`},
	}
}

func TestPlainProgress(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, false, []string{"train", "eval"})
	for _, e := range progressEvents() {
		p.Event(e)
	}
	p.Close()
	want := `==> run 2 steps
[train] started
[train] epoch 1
[train] failed: exit status 3 after 1.5s
[eval] skipped: needs "train", which did not succeed
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestJSONProgress(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, true, nil)
	for _, e := range progressEvents() {
		p.Event(e)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines, want 5:\n%s", len(lines), b.String())
	}
	var e struct {
		Kind   string `json:"kind"`
		Step   string `json:"step"`
		Result struct {
			Status string `json:"status"`
			Result struct {
				ExitCode int `json:"exitCode"`
			} `json:"result"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(lines[3]), &e); err != nil {
		t.Fatal(err)
	}
	if e.Kind != "finished" || e.Step != "train" || e.Result.Status != "failed" || e.Result.Result.ExitCode != 3 {
		t.Errorf("finished event: %+v", e)
	}
}

func TestDescribeResult(t *testing.T) {
	t0 := time.Now()
	cases := []struct {
		r    vmrunner.StepResult
		want string
	}{
		{vmrunner.StepResult{Status: vmrunner.StatusSucceeded, Started: t0, Finished: t0.Add(time.Second)}, "succeeded in 1s"},
		{vmrunner.StepResult{Status: vmrunner.StatusTimeout, Started: t0, Finished: t0.Add(time.Second)}, "timed out after 1s"},
		{vmrunner.StepResult{Status: vmrunner.StatusOOM, Started: t0, Finished: t0}, "killed: out of memory after 0s"},
		{vmrunner.StepResult{Status: vmrunner.StatusFailed, HasResult: true, Result: guest.Result{Signal: "SIGKILL"}, Started: t0, Finished: t0}, "failed: killed by SIGKILL after 0s"},
		{vmrunner.StepResult{Status: vmrunner.StatusFailed, Detail: "guest panicked"}, "failed: guest panicked"},
	}
	for _, c := range cases {
		if got := describeResult(&c.r); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}

func TestTermSafe(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"plain", "epoch 1: loss 0.25", "epoch 1: loss 0.25"},
		{"tab kept", "a\tb", "a\tb"},
		{"utf-8 kept", "✓ café 日本", "✓ café 日本"},
		{"forged succeeded line", "\r\x1b[2K✓ step succeeded", `\x0d\x1b[2K✓ step succeeded`},
		{"cursor up and erase", "\x1b[1A\x1b[2Kdone", `\x1b[1A\x1b[2Kdone`},
		{"window title (OSC)", "\x1b]0;pwned\x07", `\x1b]0;pwned\x07`},
		{"bare CR mid-line", "100%\rok", `100%\x0dok`},
		{"backspace", "abc\b\b\bxyz", `abc\x08\x08\x08xyz`},
		{"NUL and DEL", "a\x00b\x7fc", `a\x00b\x7fc`},
		{"newline", "a\nb", `a\x0ab`},
		{"C1 CSI as UTF-8", "\u009b2K", `\u009b2K`},
		{"C1 NEL", "x\u0085y", `x\u0085y`},
		{"raw C1 byte, invalid UTF-8", "\x9b2K", `\x9b2K`},
		{"invalid UTF-8", "a\xffb\xc3", `a\xffb\xc3`},
		{"bidi override", "abc\u202etxt.exe", `abc\u202etxt.exe`},
		{"replacement char itself kept", "\ufffd", "\ufffd"},
	}
	for _, c := range cases {
		if got := termSafe(c.in); got != c.want {
			t.Errorf("%s: termSafe(%q) = %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

// hostileEvents are a job's attempts to forge apply's display.
func hostileEvents() []engine.Event {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return []engine.Event{
		{Time: t0, Kind: engine.EventStarted, Step: "build"},
		{Time: t0, Kind: engine.EventLog, Step: "build", Line: "\r\x1b[2K✓ step succeeded"},
		{Time: t0, Kind: engine.EventLog, Step: "build", Line: "\x1b[1A\x1b[2K\x1b]0;title\x07\u009b2K"},
		{Time: t0, Kind: engine.EventFinished, Step: "build", Result: &vmrunner.StepResult{
			Status: vmrunner.StatusFailed, Detail: "init said \x1b[32mfine\x1b[0m",
			Started: t0, Finished: t0.Add(time.Second)}},
	}
}

// assertNoControls fails when out holds a control character other than
// the newlines and tabs a display writes itself (and, for the live view,
// the display's own cursor sequences, which allowed lists).
func assertNoControls(t *testing.T, out string, allowed ...string) {
	t.Helper()
	for _, a := range allowed {
		out = strings.ReplaceAll(out, a, "")
	}
	for i, r := range out {
		if r == '\n' || r == '\t' {
			continue
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == utf8.RuneError {
			t.Errorf("control %U at byte %d reaches the terminal: %q", r, i, out)
			return
		}
	}
}

func TestPlainProgressNeutralisesJobOutput(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, false, []string{"build"})
	for _, e := range hostileEvents() {
		p.Event(e)
	}
	p.Close()
	want := `[build] started
[build] \x0d\x1b[2K✓ step succeeded
[build] \x1b[1A\x1b[2K\x1b]0;title\x07\u009b2K
[build] failed: init said \x1b[32mfine\x1b[0m
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	assertNoControls(t, b.String())
}

func TestLiveProgressNeutralisesJobOutput(t *testing.T) {
	var b bytes.Buffer
	p := newLiveProgress(&b, []string{"build"})
	for _, e := range hostileEvents()[:2] {
		p.Event(e)
	}
	p.Close()
	out := b.String()
	// The display's own cursor-up-and-erase is the only sequence allowed.
	assertNoControls(t, out, "\x1b[1A\x1b[2K")
	if !strings.Contains(out, `\x0d\x1b[2K✓ step succeeded`) {
		t.Errorf("the job's line is not shown escaped:\n%q", out)
	}
}

func TestJSONProgressEscapesControls(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, true, nil)
	line := "\r\x1b[2K✓ ok \u009b2K \x7f \u0085 é"
	p.Event(engine.Event{Kind: engine.EventLog, Step: "build", Line: line})
	assertNoControls(t, strings.TrimSuffix(b.String(), "\n"))
	var e engine.Event
	if err := json.Unmarshal(b.Bytes(), &e); err != nil {
		t.Fatalf("%v: %q", err, b.String())
	}
	if e.Line != line {
		t.Errorf("JSON line decodes to %q, want the job's exact %q", e.Line, line)
	}
	if !strings.Contains(b.String(), `\u009b`) || !strings.Contains(b.String(), `\u007f`) {
		t.Errorf("C1 and DEL not escaped: %q", b.String())
	}
}

// TestApplyNeutralisesForgedLine runs a real job that prints a forged
// "succeeded" line: apply's progress shows it escaped, with no control
// character on the caller's terminal, and the stdout log blob keeps the
// job's raw bytes.
func TestApplyNeutralisesForgedLine(t *testing.T) {
	testtier.Root(t)
	dir := t.TempDir()
	wf := `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: forge
steps:
  - name: forge
    run: |
      printf '\r\033[2K\342\234\223 step succeeded\n\033]0;owned\007\233\061K\n'
      exit 3
    resources: {timeout: 30s}
`
	p := filepath.Join(dir, "forge.yaml")
	if err := os.WriteFile(p, []byte(wf), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	code, out, stderr := execute(t, "apply", "--isolation", "namespace", "--state-dir", state, p)
	if code != ExitStepFailed {
		t.Fatalf("apply: exit %d, want %d\n%s\n%s", code, ExitStepFailed, out, stderr)
	}
	assertNoControls(t, out)
	assertNoControls(t, stderr)
	for _, want := range []string{`[forge] \x0d\x1b[2K✓ step succeeded`, `[forge] \x1b]0;owned\x07\x9b1K`, "[forge] failed: exit status 3"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("progress lacks %q:\n%s", want, stderr)
		}
	}
	raw := "\r\x1b[2K✓ step succeeded\n\x1b]0;owned\x07\x9b1K\n"
	blobs, _ := filepath.Glob(filepath.Join(state, "blobs", "*", "*"))
	found := false
	for _, b := range blobs {
		if data, err := os.ReadFile(b); err == nil && string(data) == raw {
			found = true
		}
	}
	if !found {
		t.Errorf("no blob holds the job's raw stdout %q", raw)
	}
}
