package nixgen

import (
	"fmt"
	"github.com/agentsandbox/agentsandbox/fsx/atomicfile"
	"os"
	"path/filepath"
	"strings"
)

// File is one generated file: a slash-separated path relative to the output
// directory, and its bytes.
type File struct {
	Path string
	Data []byte
}

// Files is the ordered set of generated files: flake.nix first, then
// steps/<step>.nix in the workflow's step order.
type Files []File

// Get returns the bytes of the file at path, and whether it exists.
func (fs Files) Get(path string) ([]byte, bool) {
	for _, f := range fs {
		if f.Path == path {
			return f.Data, true
		}
	}
	return nil, false
}

// Paths lists the files' paths in order.
func (fs Files) Paths() []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Path
	}
	return out
}

// WriteDir writes every file below dir, creating directories as needed. Each
// file is written atomically (temporary file in the same directory, rename),
// so a reader sees the old or the new content, never a torn file.
// Files in dir that are not part of fs are left alone.
//
// Nothing is fsynced: the files are a pure function of the workflow, and
// render and apply write them again each time. A crash soon after can leave
// a file empty or at its old content (ext4 flushes a file renamed over an
// old one at the next commit); the next render rewrites it. An fsync per
// file made render of 1,000 steps cost seconds.
func (fs Files) WriteDir(dir string) error {
	made := map[string]bool{}
	for _, f := range fs {
		if err := checkRelPath(f.Path); err != nil {
			return fmt.Errorf("write %s: %w", dir, err)
		}
		dst := filepath.Join(dir, filepath.FromSlash(f.Path))
		if parent := filepath.Dir(dst); !made[parent] {
			if err := os.MkdirAll(parent, 0o755); err != nil {
				return fmt.Errorf("write %s: %w", dst, err)
			}
			made[parent] = true
		}
		if err := atomicfile.Write(dst, f.Data, 0o644, atomicfile.Options{NoSync: true}); err != nil {
			return err
		}
	}
	return nil
}

// checkRelPath refuses paths that would leave the output directory.
func checkRelPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || filepath.Clean(filepath.FromSlash(p)) != filepath.FromSlash(p) ||
		p == ".." || strings.HasPrefix(p, "../") {
		return fmt.Errorf("file path %q is not a clean relative path", p)
	}
	return nil
}
