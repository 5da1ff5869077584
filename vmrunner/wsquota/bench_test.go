package wsquota

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// BenchmarkWorkspace is what a step's workspace costs to make and remove:
// a bare directory (no quota) beside a quota filesystem (image, mkfs, loop
// device, mount, and back) of 64 MiB and of the default 1 GiB, and of 1 GiB
// copied from a template (mkfs once).
func BenchmarkWorkspace(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		dir := b.TempDir()
		for i := 0; i < b.N; i++ {
			ws := filepath.Join(dir, "workspace")
			if err := os.Mkdir(ws, 0o700); err != nil {
				b.Fatal(err)
			}
			if err := os.RemoveAll(ws); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, size := range []struct {
		name      string
		bytes     int64
		templates bool
	}{{"quota-64MiB", 64 << 20, false}, {"quota-1GiB", 1 << 30, false}, {"quota-1GiB-template", 1 << 30, true}} {
		b.Run(size.name, func(b *testing.B) {
			testtier.Root(b)
			dir := b.TempDir()
			ws := filepath.Join(dir, "workspace")
			if err := os.Mkdir(ws, 0o700); err != nil {
				b.Fatal(err)
			}
			var tm *Templates
			if size.templates {
				tm = &Templates{Dir: filepath.Join(dir, "templates")}
			}
			for i := 0; i < b.N; i++ {
				q, err := Mount(context.Background(), Spec{Image: filepath.Join(dir, "workspace.img"), Dir: ws, Bytes: size.bytes, UID: 65534, GID: 65534, Templates: tm})
				if err != nil {
					b.Fatal(err)
				}
				if err := q.Unmount(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
