package record_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/remotetest"
	"github.com/agentsandbox/agentsandbox/record"
)

func TestDirRemote(t *testing.T) {
	remotetest.Run(t, func(t *testing.T) remotetest.Backend {
		dir := t.TempDir()
		rm, err := record.OpenDirRemote(dir)
		if err != nil {
			t.Fatal(err)
		}
		return remotetest.Backend{Remote: rm, Overwrite: func(t *testing.T, key string, data []byte) {
			p := filepath.Join(dir, filepath.FromSlash(key))
			os.Remove(p)
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}}
	})
}
