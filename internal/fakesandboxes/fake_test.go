package fakesandboxes

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

func code(err error) sandboxes.Code {
	if err == nil {
		return ""
	}
	return sandboxes.CodeOf(err)
}

func TestLifetime(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := New(t.TempDir())
	m.Now = func() time.Time { return now }
	ctx := context.Background()
	a, _ := m.Create(ctx, sandboxes.Spec{TTL: sandboxes.Duration(time.Hour), IdleTimeout: sandboxes.Duration(10 * time.Minute)})
	b, _ := m.Create(ctx, sandboxes.Spec{})
	now = now.Add(11 * time.Minute)
	if i, _ := m.Get(ctx, a.ID); i.State != sandboxes.StateStopped || i.Ended != "idle" {
		t.Errorf("after the idle timeout: %+v", i)
	}
	if _, err := m.Extend(ctx, b.ID, 2*time.Hour, 3*time.Hour); err != nil {
		t.Fatal(err)
	}
	now = now.Add(90 * time.Minute)
	if i, _ := m.Get(ctx, b.ID); i.State != sandboxes.StateRunning {
		t.Errorf("extended sandbox: %+v", i)
	}
	now = now.Add(time.Hour)
	if i, _ := m.Get(ctx, b.ID); i.State != sandboxes.StateStopped || i.Ended != "expired" {
		t.Errorf("after the ttl: %+v", i)
	}
	if _, err := m.Exec(ctx, b.ID, sandboxes.ExecRequest{Argv: []string{"true"}, Background: true}, nil); code(err) != sandboxes.CodeConflict {
		t.Errorf("exec in a stopped sandbox: %v", err)
	}
	m.Close(ctx)
	if _, err := m.Create(ctx, sandboxes.Spec{}); code(err) != sandboxes.CodeStopped {
		t.Errorf("create after Close: %v", err)
	}
}

func TestConfinement(t *testing.T) {
	m := New(t.TempDir())
	ctx := context.Background()
	sb, _ := m.Create(ctx, sandboxes.Spec{})
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600)
	os.Symlink(outside, filepath.Join(m.Dir(sb.ID), "out"))
	for _, p := range []string{"../x", "/etc/passwd", "a/../../x", "out/secret", "a\x00b"} {
		if _, err := m.GetFile(ctx, sb.ID, p, &bytes.Buffer{}); code(err) != sandboxes.CodeBadRequest {
			t.Errorf("get %q: %v, want bad_request", p, err)
		}
		if _, err := m.PutFile(ctx, sb.ID, p+"2", strings.NewReader("x"), 0); code(err) != sandboxes.CodeBadRequest {
			t.Errorf("put %q: %v, want bad_request", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "secret2")); err == nil {
		t.Error("a put went through a symlink out of the workspace")
	}
	if _, err := m.Exec(ctx, sb.ID, sandboxes.ExecRequest{Argv: []string{"true"}, Cwd: "../", Background: true}, nil); code(err) != sandboxes.CodeBadRequest {
		t.Errorf("cwd out of the workspace: %v", err)
	}
}

func TestKeptOutput(t *testing.T) {
	k := kept{path: filepath.Join(t.TempDir(), "out"), limit: 100}
	k.write(bytes.Repeat([]byte("a"), 3*sandboxes.OutputWindow))
	k.write([]byte("bc"))
	if k.total != 3*sandboxes.OutputWindow+2 || k.base <= k.limit || k.onDisk != k.limit {
		t.Fatalf("kept: total %d base %d on disk %d", k.total, k.base, k.onDisk)
	}
	if b, gap, err := k.from(0); len(b) != 100 || gap != 0 || err != nil {
		t.Errorf("from 0: %d bytes, gap to %d, %v; want the 100 on disk", len(b), gap, err)
	}
	if b, gap, _ := k.from(100); b != nil || gap != k.base {
		t.Errorf("from the disk limit: %q, gap to %d; want a gap to %d", b, gap, k.base)
	}
	if b, gap, _ := k.from(k.total - 2); string(b) != "bc" || gap != 0 {
		t.Errorf("from the end: %q", b)
	}
	if b, _, _ := k.from(k.total + 5); b != nil {
		t.Errorf("past the end: %q", b)
	}
}

// TestForegroundEveryByte: as with the real manager, a foreground reader
// slower than its command gets every byte: past what is kept on disk the
// command waits for it.
func TestForegroundEveryByte(t *testing.T) {
	m := New(t.TempDir())
	m.LogLimit = 1000
	ctx := context.Background()
	sb, err := m.Create(ctx, sandboxes.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	const size = 24 << 20
	var next int64
	info, err := m.Exec(ctx, sb.ID, sandboxes.ExecRequest{Shell: "yes | head -c 25165824"}, func(ev sandboxes.ExecEvent) error {
		switch ev.Type {
		case sandboxes.EventStdout:
			if ev.Offset != next || strings.Trim(ev.Text, "y\n") != "" {
				t.Fatalf("an event at %d (want %d) of %d bytes", ev.Offset, next, len(ev.Text))
			}
			next += int64(len(ev.Text))
			time.Sleep(200 * time.Microsecond)
		case sandboxes.EventGap:
			t.Fatalf("a foreground reader got a gap: %+v", ev)
		}
		return nil
	})
	if err != nil || next != size || info.Exit == nil {
		t.Fatalf("got %d of %d bytes: %+v %v", next, size, info, err)
	}
}
