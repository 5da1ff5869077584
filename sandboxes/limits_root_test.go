package sandboxes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/engine"
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

// TestPutOverQuotaLeavesNoPartialFile: a put the workspace's disk quota
// cannot hold is refused as too large and leaves nothing: a new path
// stays absent and a file that was there keeps its bytes (before, the put
// truncated it and left the part that fitted), and the space is free
// again for the next put.
func TestPutOverQuotaLeavesNoPartialFile(t *testing.T) {
	m, _ := newManager(t, Options{})
	ctx := context.Background()
	info, err := m.Create(ctx, Spec{Resources: map[string]any{"disk": "16MiB"}})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	old := bytes.Repeat([]byte("old "), 1<<20) // 4 MiB
	if _, err := m.PutFile(ctx, id, "keep.bin", bytes.NewReader(old), 0); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("big!"), 5<<20) // 20 MiB: over the disk
	for _, p := range []string{"keep.bin", "dir/new.bin"} {
		_, err := m.PutFile(ctx, id, p, bytes.NewReader(big), 0)
		if CodeOf(err) != CodeTooLarge || !strings.Contains(err.Error(), "disk is full") {
			t.Errorf("put of 20 MiB to %s on a 16 MiB disk: %v (code %s), want too_large", p, err, CodeOf(err))
		}
	}
	var got bytes.Buffer
	if _, err := m.GetFile(ctx, id, "keep.bin", &got); err != nil || !bytes.Equal(got.Bytes(), old) {
		t.Errorf("keep.bin after a refused put: %d bytes, %v; want its 4 MiB as they were", got.Len(), err)
	}
	if _, err := m.Stat(ctx, id, "dir/new.bin"); CodeOf(err) != CodeNotFound {
		t.Errorf("dir/new.bin after a refused put: %v, want not found", err)
	}
	out, _, _ := collect(t, m, id, ExecRequest{Shell: "ls -A . dir"})
	if strings.Contains(out, ".agentsandbox") || strings.Count(out, "bin") != 1 {
		t.Errorf("the workspace after refused puts:\n%s", out)
	}
	// The refused bytes took no room: 8 MiB more fit beside the 4.
	if _, err := m.PutFile(ctx, id, "dir/fits.bin", bytes.NewReader(big[:8<<20]), 0); err != nil {
		t.Errorf("put of 8 MiB after the refused ones: %v", err)
	}
}

// TestHostCeilingsAtAdmission: with the host's capacity probed at each
// admission (as serve does), a sandbox or a run asking for more vcpu,
// memory or disk than the host has is refused before anything is opened,
// with the ceiling and the host's figure; one within them opens. Before,
// an 8 TiB, 64 GiB, 16-vCPU sandbox was admitted on a 2-CPU, 23 GiB host.
func TestHostCeilingsAtAdmission(t *testing.T) {
	var o Options
	o.Engine.Host.Capacity = engine.CapacityOf(t.TempDir(), t.Logf)
	m, _ := newManager(t, o)
	ctx := context.Background()
	c, err := engine.ProbeCapacity(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Create(ctx, Spec{Resources: map[string]any{"disk": "8TiB", "memory": "64GiB", "vcpu": 16}})
	if CodeOf(err) != CodeDenied {
		t.Fatalf("an 8 TiB, 64 GiB, 16-vCPU sandbox: %v (code %s), want policy_denied", err, CodeOf(err))
	}
	t.Logf("refused: %v", err)
	for _, s := range []string{
		"resources.disk 8.0TiB is above this host's ceiling", "the space free on ",
		fmt.Sprintf("(1 × its %d CPUs; data.agentsandbox.host_ceilings.vcpu)", c.CPUs),
		"resources.memory 64.0GiB is above this host's ceiling", "its memory, ",
	} {
		if c.CPUs >= 16 && strings.Contains(s, "CPUs") || c.MemoryBytes >= 64<<30 && strings.Contains(s, "memory") {
			continue // a host that big has the figures asked for
		}
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the refusal does not say %q:\n%v", s, err)
		}
	}
	// A run's steps are judged the same way.
	inline := fmt.Sprintf("apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: big\nsteps:\n  - name: s\n    isolation: namespace\n    run: \"true\"\n    resources: {vcpu: %d}\n", c.CPUs+1)
	_, err = m.(Runner).Run(ctx, RunRequest{Inline: inline})
	if CodeOf(err) != CodeDenied || !strings.Contains(err.Error(), "host_ceilings.vcpu") {
		t.Errorf("a run of %d vCPUs on a %d-CPU host: %v (code %s)", c.CPUs+1, c.CPUs, err, CodeOf(err))
	}
	if _, err := m.Create(ctx, Spec{Resources: map[string]any{"vcpu": c.CPUs, "disk": "64MiB"}}); err != nil {
		t.Errorf("a sandbox within the host's figures: %v", err)
	}
}
