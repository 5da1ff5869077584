package sandboxes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strings"
	"testing"
)

// TestLongPathsRefused: on the real manager (whose workspace is a
// filesystem of its own) a path longer than Linux takes, or with a name
// over NAME_MAX, is a bad request on every file method, and so is a
// template or workflow file name as long; before, the kernel's
// ENAMETOOLONG came back as an internal error (500) or a 404.
func TestLongPathsRefused(t *testing.T) {
	m, _ := newManager(t, Options{TemplateDir: t.TempDir()})
	ctx := context.Background()
	info, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	long := strings.Repeat("a/", 2500)[:5000]
	name := "dir/" + strings.Repeat("n", 300)
	for _, p := range []string{long, name} {
		calls := map[string]func() error{
			"PutFile": func() error {
				_, err := m.PutFile(ctx, id, p, strings.NewReader("x"), 0)
				return err
			},
			"GetFile":    func() error { _, err := m.GetFile(ctx, id, p, io.Discard); return err },
			"Stat":       func() error { _, err := m.Stat(ctx, id, p); return err },
			"ListFiles":  func() error { _, err := m.ListFiles(ctx, id, p); return err },
			"RemoveFile": func() error { return m.RemoveFile(ctx, id, p, true) },
		}
		for what, call := range calls {
			err := call()
			if CodeOf(err) != CodeBadRequest || !strings.Contains(err.Error(), "the most is") {
				t.Errorf("%s of a %d-byte path: %v (code %s), want a bad request naming the limit", what, len(p), err, CodeOf(err))
			}
		}
		_, err := m.Create(ctx, Spec{Template: p + "#step"})
		if CodeOf(err) != CodeBadRequest || !strings.Contains(err.Error(), "template file") {
			t.Errorf("a template of a %d-byte path: %v (code %s)", len(p), err, CodeOf(err))
		}
		_, err = m.(Runner).Run(ctx, RunRequest{Workflow: p})
		if CodeOf(err) != CodeBadRequest || !strings.Contains(err.Error(), "workflow file") {
			t.Errorf("a run of a %d-byte workflow path: %v (code %s)", len(p), err, CodeOf(err))
		}
	}
	// Nothing was written, and a path at the limits works.
	deep := strings.Repeat("d/", 100) + strings.Repeat("f", MaxNameBytes)
	if _, err := m.PutFile(ctx, id, deep, strings.NewReader("deep"), 0); err != nil {
		t.Fatalf("put at the name limit: %v", err)
	}
	var got bytes.Buffer
	if _, err := m.GetFile(ctx, id, deep, &got); err != nil || got.String() != "deep" {
		t.Errorf("get at the name limit: %q %v", got.String(), err)
	}
}

// TestGetFileSHA256: a get gives the SHA-256 of the bytes it sent, which
// the server sends as the trailer X-Agentsandbox-Sha256; before, the real
// manager left it empty and the declared trailer never came.
func TestGetFileSHA256(t *testing.T) {
	m, _ := newManager(t, Options{})
	ctx := context.Background()
	info, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	content := strings.Repeat("0123456789abcdef", 10000)
	put, err := m.PutFile(ctx, info.ID, "data/blob", strings.NewReader(content), 0)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	fi, err := m.GetFile(ctx, info.ID, "data/blob", &got)
	if err != nil || got.String() != content {
		t.Fatalf("get: %v (%d bytes)", err, got.Len())
	}
	sum := sha256.Sum256([]byte(content))
	if fi.SHA256 != hex.EncodeToString(sum[:]) || fi.SHA256 != put.SHA256 {
		t.Errorf("get's sha256 %q, put's %q, want %x", fi.SHA256, put.SHA256, sum)
	}
}
