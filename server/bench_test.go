package server

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// BenchmarkExecRoundTrip sizes the server's own overhead: an exec of
// `true` through HTTP over a unix socket, beside the same exec called on
// the manager directly (the real one, on the fake backend). The
// difference is the server's (and the HTTP client's) cost per exec.
func BenchmarkExecRoundTrip(b *testing.B) {
	fake := managertest.New(b, sandboxes.Options{})
	defer fake.Close(context.Background())
	sb, err := fake.Create(context.Background(), sandboxes.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if _, err := fake.Exec(context.Background(), sb.ID, sandboxes.ExecRequest{Argv: []string{"true"}}, func(sandboxes.ExecEvent) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("http-unix", func(b *testing.B) { benchHTTP(b, fake, sb.ID) })
	// instant answers an exec at once, without a process: what is left
	// is the server's overhead alone.
	b.Run("http-unix-no-process", func(b *testing.B) { benchHTTP(b, instant{fake}, sb.ID) })
}

type instant struct{ *managertest.Manager }

func (instant) Exec(_ context.Context, id string, r sandboxes.ExecRequest, emit func(sandboxes.ExecEvent) error) (sandboxes.ExecInfo, error) {
	now := time.Now()
	if err := emit(sandboxes.ExecEvent{Type: sandboxes.EventStarted, ExecID: "ex-1", Time: now}); err != nil {
		return sandboxes.ExecInfo{}, err
	}
	return sandboxes.ExecInfo{ID: "ex-1"}, emit(sandboxes.ExecEvent{Type: sandboxes.EventExit, ExecID: "ex-1", Time: now, Exit: &sandboxes.ExitStatus{}})
}

func benchHTTP(b *testing.B, m sandboxes.Manager, id string) {
	s, err := New(Options{Manager: m})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	sock := filepath.Join(dir, "api.sock")
	if len(sock) > 100 {
		b.Skip("the temporary directory's path is too long for a unix socket")
	}
	l, err := ListenUnix(sock)
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(l)
	defer func() {
		for _, hs := range s.servers {
			hs.Close()
		}
	}()
	c := unixClient(sock)
	url := "http://sandbox/v1/sandboxes/" + id + "/exec"
	for b.Loop() {
		resp, err := c.Post(url, "application/json", strings.NewReader(`{"argv": ["true"]}`))
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"type":"exit"`) {
			b.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
}
