package jobfs

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/nix-community/go-nix/pkg/nar"
)

func openRoot(t *testing.T, dir string) *Root {
	t.Helper()
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func bigBudget() *Budget { return &Budget{MaxBytes: 1 << 30, MaxEntries: 1 << 20} }

// hostile makes a workspace the way an attacking job would: symlinks to /
// and /proc, a FIFO, and a secret outside the workspace the job must not
// reach through them.
func hostile(t *testing.T) (ws, secret string) {
	t.Helper()
	base := t.TempDir()
	ws = filepath.Join(base, "ws")
	secret = filepath.Join(base, "secret")
	write(t, secret, "host secret", 0o600)
	write(t, filepath.Join(ws, "ok", "file"), "fine", 0o644)
	for name, target := range map[string]string{"host": "/", "proc": "/proc", "up": "..", "rel": "ok"} {
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	return ws, secret
}

func TestSymlinkInAComponentIsRefused(t *testing.T) {
	ws, secret := hostile(t)
	r := openRoot(t, ws)
	for _, rel := range []string{
		"host" + secret, "host/etc/passwd", "host/etc", "proc/self/environ", "proc/kmsg",
		"up/secret", "rel/file",
	} {
		if _, err := r.Lstat(rel); !errors.Is(err, ErrSymlink) {
			t.Errorf("Lstat(%q) = %v, want ErrSymlink", rel, err)
		}
		if _, _, err := r.OpenFile(rel); !errors.Is(err, ErrSymlink) {
			t.Errorf("OpenFile(%q) = %v, want ErrSymlink", rel, err)
		}
		var buf bytes.Buffer
		if err := r.DumpNAR(&buf, rel, bigBudget()); !errors.Is(err, ErrSymlink) {
			t.Errorf("DumpNAR(%q) = %v, want ErrSymlink", rel, err)
		}
		if strings.Contains(buf.String(), "host secret") || strings.Contains(buf.String(), "root:") {
			t.Errorf("DumpNAR(%q) wrote host content", rel)
		}
	}
	for _, rel := range []string{"../secret", "/etc/passwd", "ok/../../secret"} {
		if _, err := r.Lstat(rel); !errors.Is(err, ErrOutside) {
			t.Errorf("Lstat(%q) = %v, want ErrOutside", rel, err)
		}
	}
	if _, err := r.ReadFile("ok/file", 100); err != nil {
		t.Errorf("ReadFile of a plain file: %v", err)
	}
}

func TestRootMustNotBeASymlink(t *testing.T) {
	ws, _ := hostile(t)
	link := filepath.Join(t.TempDir(), "ws-link")
	if err := os.Symlink(ws, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(link); !errors.Is(err, ErrSymlink) {
		t.Fatalf("Open(symlink to a directory) = %v, want ErrSymlink", err)
	}
}

// narOf parses a NAR into "path type target/content" lines.
func narOf(t *testing.T, b []byte) []string {
	t.Helper()
	nr, err := nar.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for {
		h, err := nr.Next()
		if err != nil {
			break
		}
		line := h.Path + " " + h.Type.String()
		if h.Type == nar.TypeSymlink {
			line += " -> " + h.LinkTarget
		}
		out = append(out, line)
	}
	return out
}

func TestSymlinksAreStoredAsSymlinks(t *testing.T) {
	ws, _ := hostile(t)
	r := openRoot(t, ws)
	var buf bytes.Buffer
	if err := r.DumpNAR(&buf, "host", bigBudget()); err != nil {
		t.Fatal(err)
	}
	if got := narOf(t, buf.Bytes()); len(got) != 1 || got[0] != "/ symlink -> /" {
		t.Fatalf("NAR of the symlink host = %q, want one symlink to /", got)
	}
	if info, err := r.Lstat("proc"); err != nil || info.Kind != Symlink || info.Target != "/proc" {
		t.Fatalf("Lstat(proc) = %+v, %v", info, err)
	}
	if _, _, err := r.OpenFile("proc"); !errors.Is(err, ErrSymlink) {
		t.Fatalf("OpenFile(a symlink) = %v, want ErrSymlink", err)
	}
}

// TestNARMatchesDumpPath: for an ordinary tree DumpNAR writes the very bytes
// of go-nix's DumpPath (which the record tests check against nix hash path).
func TestNARMatchesDumpPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tree")
	write(t, filepath.Join(dir, "b", "z"), "zed\n", 0o644)
	write(t, filepath.Join(dir, "a.sh"), "#!/bin/sh\n", 0o755)
	write(t, filepath.Join(dir, "B"), "", 0o600)
	write(t, filepath.Join(dir, "b", "c", "deep"), strings.Repeat("x", 100_001), 0o644)
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../a.sh", filepath.Join(dir, "b", "link")); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{".", "a.sh", "b", "b/link", "empty"} {
		var want, got bytes.Buffer
		if err := nar.DumpPath(&want, filepath.Join(dir, rel)); err != nil {
			t.Fatal(err)
		}
		b := bigBudget()
		if err := openRoot(t, dir).DumpNAR(&got, rel, b); err != nil {
			t.Fatalf("DumpNAR(%q): %v", rel, err)
		}
		if sha256.Sum256(got.Bytes()) != sha256.Sum256(want.Bytes()) {
			t.Errorf("DumpNAR(%q) differs from nar.DumpPath:\n got %q\nwant %q", rel, narOf(t, got.Bytes()), narOf(t, want.Bytes()))
		}
	}
}

// TestFIFORefusedWithoutBlocking: nothing may open a FIFO (an open for
// reading would block until a writer comes, which is never).
func TestFIFORefusedWithoutBlocking(t *testing.T) {
	ws, _ := hostile(t)
	write(t, filepath.Join(ws, "dir", "a"), "a", 0o644)
	if err := syscall.Mkfifo(filepath.Join(ws, "dir", "b-fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := openRoot(t, ws)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, _, err := r.OpenFile("fifo"); !errors.Is(err, ErrType) {
			t.Errorf("OpenFile(fifo) = %v, want ErrType", err)
		}
		if _, err := r.ReadFile("fifo", 10); !errors.Is(err, ErrType) {
			t.Errorf("ReadFile(fifo) = %v, want ErrType", err)
		}
		var buf bytes.Buffer
		if err := r.DumpNAR(&buf, "dir", bigBudget()); !errors.Is(err, ErrType) || !strings.Contains(err.Error(), "dir/b-fifo") {
			t.Errorf("DumpNAR(a directory holding a FIFO) = %v, want ErrType naming dir/b-fifo", err)
		}
		if _, err := r.ReadDir("fifo", -1); err == nil {
			t.Error("ReadDir(fifo) succeeded")
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("reading a FIFO blocked")
	}
}

func TestDeviceRefused(t *testing.T) {
	testtier.Root(t)
	ws := t.TempDir()
	// /dev/zero's numbers: reading it would never end.
	if err := syscall.Mknod(filepath.Join(ws, "zero"), syscall.S_IFCHR|0o666, int(1<<8|5)); err != nil {
		t.Fatal(err)
	}
	r := openRoot(t, ws)
	if _, err := r.ReadFile("zero", 10); !errors.Is(err, ErrType) || !strings.Contains(err.Error(), "character device") {
		t.Fatalf("ReadFile(char device) = %v, want ErrType", err)
	}
	var buf bytes.Buffer
	if err := r.DumpNAR(&buf, ".", bigBudget()); !errors.Is(err, ErrType) {
		t.Fatalf("DumpNAR(tree with a device) = %v, want ErrType", err)
	}
}

func TestBudget(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a"), strings.Repeat("a", 600), 0o644)
	write(t, filepath.Join(dir, "b"), strings.Repeat("b", 600), 0o644)
	r := openRoot(t, dir)

	b := &Budget{MaxBytes: 1000, MaxEntries: 100}
	if err := r.DumpNAR(&bytes.Buffer{}, "a", b); err != nil {
		t.Fatal(err)
	}
	err := r.DumpNAR(&bytes.Buffer{}, "b", b)
	var le *LimitError
	if !errors.As(err, &le) || !errors.Is(err, ErrLimit) || le.Path != "b" || le.Size != 600 || le.Used != 600 || le.Limit != 1000 {
		t.Fatalf("second output over a shared budget: %v (%+v)", err, le)
	}

	for i := 0; i < 20; i++ {
		write(t, filepath.Join(dir, "many", strings.Repeat("f", i+1)), "", 0o644)
	}
	b = &Budget{MaxBytes: 1000, MaxEntries: 10}
	err = r.DumpNAR(&bytes.Buffer{}, "many", b)
	if !errors.As(err, &le) || le.What != "entries" || le.Limit != 10 {
		t.Fatalf("a directory over the entry budget: %v", err)
	}

	if _, err := r.ReadFile("a", 599); !errors.Is(err, ErrLimit) {
		t.Fatalf("ReadFile over its maximum: %v", err)
	}
}

// TestSparseFileCountsInFull: a 1 TiB sparse file uses no disk, and is
// refused by its apparent size before a byte of it is read.
func TestSparseFileCountsInFull(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r := openRoot(t, dir)
	start := time.Now()
	var buf bytes.Buffer
	err = r.DumpNAR(&buf, ".", &Budget{MaxBytes: 64 << 20, MaxEntries: 10})
	var le *LimitError
	if !errors.As(err, &le) || le.Path != "sparse" || le.Size != 1<<40 {
		t.Fatalf("DumpNAR of a sparse file = %v, want a LimitError for sparse", err)
	}
	if took := time.Since(start); took > 5*time.Second || buf.Len() > 1<<10 {
		t.Fatalf("refusing took %v and wrote %d bytes", took, buf.Len())
	}
	if want := "file sparse is 1099511627776 bytes, over the limit of 67108864 bytes"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

func TestLchownAllDoesNotFollow(t *testing.T) {
	testtier.Root(t)
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	write(t, filepath.Join(outside, "f"), "x", 0o644)
	ws := filepath.Join(base, "ws")
	write(t, filepath.Join(ws, "sub", "f"), "x", 0o644)
	if err := os.Symlink(outside, filepath.Join(ws, "sub", "link")); err != nil {
		t.Fatal(err)
	}
	if err := openRoot(t, ws).LchownAll(".", 4242, 4343); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{ws, filepath.Join(ws, "sub"), filepath.Join(ws, "sub", "f"), filepath.Join(ws, "sub", "link")} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 4242 || st.Gid != 4343 {
			t.Errorf("%s owned by %d:%d, want 4242:4343", p, st.Uid, st.Gid)
		}
	}
	for _, p := range []string{outside, filepath.Join(outside, "f")} {
		fi, _ := os.Lstat(p)
		if st := fi.Sys().(*syscall.Stat_t); st.Uid == 4242 {
			t.Errorf("%s, reached through a symlink, was chowned", p)
		}
	}
}
