package sandboxes

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestInteractiveStdin: a namespace sandbox's cat started with StdinOpen
// reads each write (one bigger than a session chunk too) and exits 0 once
// its stdin is closed; a write over the bound, to another sandbox's exec,
// or after the close is refused.
func TestInteractiveStdin(t *testing.T) {
	m, _ := newManager(t, Options{})
	ctx := context.Background()
	a, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	x, err := m.Exec(ctx, a.ID, ExecRequest{Argv: []string{"sha256sum"}, StdinOpen: true, Background: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16) // 300 KiB: several chunks of the session
	want := append([]byte("hello\n"), big...)
	if err := m.WriteStdin(ctx, a.ID, x.ID, want[:6]); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteStdin(ctx, a.ID, x.ID, want[6:]); err != nil {
		t.Fatal(err)
	}
	var e *Error
	if err := m.WriteStdin(ctx, a.ID, x.ID, make([]byte, MaxStdinWrite+1)); !asError(err, &e) || e.Code != CodeTooLarge {
		t.Errorf("a write over MaxStdinWrite: %v", err)
	}
	if err := m.WriteStdin(ctx, b.ID, x.ID, []byte("intruder\n")); !asError(err, &e) || e.Code != CodeNotFound {
		t.Errorf("a write to another sandbox's exec: %v", err)
	}
	if err := m.CloseStdin(ctx, a.ID, x.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteStdin(ctx, a.ID, x.ID, []byte("late")); !asError(err, &e) || e.Code != CodeConflict {
		t.Errorf("a write after the close: %v", err)
	}
	var out strings.Builder
	var exit *ExitStatus
	if err := m.Output(ctx, a.ID, x.ID, 0, 0, true, func(ev ExecEvent) error {
		out.WriteString(ev.Text)
		if ev.Exit != nil {
			exit = ev.Exit
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	wantSum, _, _ := collect(t, m, b.ID, ExecRequest{Argv: []string{"sha256sum"}, Stdin: ptr(string(want))})
	if exit == nil || exit.ExitCode != 0 || out.String() != wantSum || !strings.HasSuffix(wantSum, "  -\n") {
		t.Fatalf("sha256sum of the written stdin: %q (exit %+v), want %q", out.String(), exit, wantSum)
	}
	// Without StdinOpen there is no stdin to write to, and both at once
	// are refused.
	y, err := m.Exec(ctx, a.ID, ExecRequest{Argv: []string{"sleep", "30"}, Background: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WriteStdin(ctx, a.ID, y.ID, []byte("x")); !asError(err, &e) || e.Code != CodeConflict || !strings.Contains(e.Message, "stdinOpen") {
		t.Errorf("a write to an exec without stdinOpen: %v", err)
	}
	if _, err := m.Exec(ctx, a.ID, ExecRequest{Argv: []string{"cat"}, Stdin: ptr("x"), StdinOpen: true}, nil); !asError(err, &e) || e.Code != CodeBadRequest {
		t.Errorf("stdin and stdinOpen together: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestPTY: a namespace sandbox's command on a pty has a terminal of the
// sandbox's own devpts of the size asked for, echoes its input, and a
// resize changes the size; a pty of no size, a resize of an exec without
// one, or of another sandbox's exec, are refused.
func TestPTY(t *testing.T) {
	m, _ := newManager(t, Options{})
	ctx := context.Background()
	a, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	var e *Error
	if _, err := m.Exec(ctx, a.ID, ExecRequest{Argv: []string{"tty"}, PTY: &PTYSize{Cols: 0, Rows: 24}}, nil); !asError(err, &e) || e.Code != CodeBadRequest {
		t.Errorf("a pty of 0 columns: %v", err)
	}
	x, err := m.Exec(ctx, a.ID, ExecRequest{Shell: `tty; stty size; read x; stty size; echo "got:$x"`, PTY: &PTYSize{Cols: 80, Rows: 24}, Background: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	output := func() string {
		var out strings.Builder
		if err := m.Output(ctx, a.ID, x.ID, 0, 0, false, func(ev ExecEvent) error {
			if ev.Type == EventStderr {
				t.Errorf("a stderr event from a pty: %+v", ev)
			}
			out.WriteString(ev.Text)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(output(), "24 80") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if err := m.ResizePTY(ctx, b.ID, x.ID, PTYSize{Cols: 100, Rows: 30}); !asError(err, &e) || e.Code != CodeNotFound {
		t.Errorf("a resize of another sandbox's exec: %v", err)
	}
	if err := m.ResizePTY(ctx, a.ID, x.ID, PTYSize{Cols: 100, Rows: 30}); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteStdin(ctx, a.ID, x.ID, []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	var exit *ExitStatus
	if err := m.Output(ctx, a.ID, x.ID, 0, 0, true, func(ev ExecEvent) error {
		if ev.Exit != nil {
			exit = ev.Exit
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	all := output()
	if exit == nil || exit.ExitCode != 0 {
		t.Fatalf("the pty's command: exit %+v, output %q", exit, all)
	}
	for _, want := range []string{"/dev/pts/0\r\n", "24 80\r\n", "hello\r\n", "30 100\r\n", "got:hello\r\n"} {
		if !strings.Contains(all, want) {
			t.Errorf("the pty's output has no %q: %q", want, all)
		}
	}
	y, err := m.Exec(ctx, a.ID, ExecRequest{Argv: []string{"sleep", "30"}, Background: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.ResizePTY(ctx, a.ID, y.ID, PTYSize{Cols: 100, Rows: 30}); !asError(err, &e) || e.Code != CodeConflict {
		t.Errorf("a resize of an exec without a pty: %v", err)
	}
}
