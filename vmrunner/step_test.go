package vmrunner

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
)

func TestReadResult(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := ReadResult(dir); ok || err == nil {
		t.Fatalf("missing result: ok=%v err=%v", ok, err)
	}
	os.WriteFile(filepath.Join(dir, guest.ResultFile), []byte(`{"version":1,"exitCode":3}`), 0o644)
	r, ok, err := ReadResult(dir)
	if !ok || err != nil || r.ExitCode != 3 {
		t.Fatalf("got %+v %v %v", r, ok, err)
	}
	os.WriteFile(filepath.Join(dir, guest.ResultFile), []byte(`{"version":`), 0o644)
	if _, ok, err := ReadResult(dir); ok || err == nil {
		t.Fatalf("truncated result: ok=%v err=%v", ok, err)
	}
}

// TestReadResultHostile: result.json comes from inside the sandbox. Too big,
// not a regular file, through a symlink, with unknown fields, two values or
// another version, it is no result, with an error saying why.
func TestReadResultHostile(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		make       func(path string) error
	}{
		{"oversized", "over the limit of 65536 bytes", func(p string) error {
			return os.WriteFile(p, []byte(`{"version":1,"exitCode":0,"error":"`+strings.Repeat("x", 1<<20)+`"}`), 0o644)
		}},
		{"sparse", "over the limit", func(p string) error { return os.Truncate(p, 1<<40) }},
		{"fifo", "not a regular file", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{"symlink", "symlink", func(p string) error { return os.Symlink("/etc/passwd", p) }},
		{"unknown field", `unknown field "extra"`, func(p string) error {
			return os.WriteFile(p, []byte(`{"version":1,"exitCode":0,"extra":1}`), 0o644)
		}},
		{"two values", "more than one JSON value", func(p string) error {
			return os.WriteFile(p, []byte(`{"version":1,"exitCode":0} {"version":1,"exitCode":0}`), 0o644)
		}},
		{"other version", "protocol version 2", func(p string) error {
			return os.WriteFile(p, []byte(`{"version":2,"exitCode":0}`), 0o644)
		}},
		{"not an object", "decode result", func(p string) error { return os.WriteFile(p, []byte(`[1]`), 0o644) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, guest.ResultFile)
			if tc.name == "sparse" {
				if err := os.WriteFile(p, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := tc.make(p); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				r, ok, err := ReadResult(dir)
				if ok || err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("ReadResult = %+v, %v, %v; want no result and an error containing %q", r, ok, err, tc.want)
				}
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("ReadResult blocked")
			}
		})
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, guest.ResultFile), []byte("{\"version\":1,\"exitCode\":0}\n\n"), 0o644)
	if _, ok, err := ReadResult(dir); !ok || err != nil {
		t.Errorf("a result with trailing white space: ok=%v err=%v", ok, err)
	}
}
