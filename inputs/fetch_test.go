package inputs

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/workflow"
)

func sum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

func newFetcher(t *testing.T) *Fetcher {
	t.Helper()
	s, err := record.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &Fetcher{Store: s, Limits: DefaultLimits}
}

// storeFiles lists the regular files under the store's blobs/ and tmp/.
func storeFiles(t *testing.T, s *record.Store) []string {
	t.Helper()
	var files []string
	for _, sub := range []string{"blobs", "tmp"} {
		filepath.WalkDir(filepath.Join(s.Dir(), sub), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				files = append(files, p)
			}
			return nil
		})
	}
	return files
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFileInputPinned(t *testing.T) {
	f := newFetcher(t)
	base := t.TempDir()
	content := []byte("a,b\n1,2\n")
	writeFile(t, filepath.Join(base, "data", "in.csv"), content)
	in := workflow.Input{Name: "data", Kind: workflow.InputFile, Source: "data/in.csv", SHA256: sum(content), Dest: "data.csv"}
	ws := t.TempDir()
	got, err := f.Fetch(context.Background(), in, base, filepath.Join(ws, "data.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Cached || got.Input.Format != record.FormatFile || got.Input.Digest.Hex() != in.SHA256 || got.Input.Size != int64(len(content)) {
		t.Fatalf("Fetched = %+v", got)
	}
	if got.Input.Name != "data" || got.Input.Kind != "file" || got.Input.Source != "data/in.csv" {
		t.Fatalf("record input = %+v", got.Input)
	}
	fi, err := os.Lstat(got.Path)
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("dst is %v (%v); want a copied regular file, never a symlink", fi, err)
	}
	if b, _ := os.ReadFile(got.Path); !bytes.Equal(b, content) {
		t.Fatalf("dst holds %q", b)
	}
	if err := f.Store.VerifyBlob(got.Input.Digest); err != nil {
		t.Fatal(err)
	}
	// The source may go away: a pinned input is served from the store.
	os.Remove(filepath.Join(base, "data", "in.csv"))
	again, err := f.Fetch(context.Background(), in, base, filepath.Join(ws, "second"))
	if err != nil || !again.Cached || again.Input.Digest != got.Input.Digest {
		t.Fatalf("second fetch = %+v, %v; want a cache hit", again, err)
	}
	if _, err := f.Fetch(context.Background(), in, base, got.Path); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("fetch onto an existing path: %v", err)
	}
}

func TestFileInputChecksumMismatchLeavesNothing(t *testing.T) {
	f := newFetcher(t)
	base := t.TempDir()
	content := []byte("tampered")
	writeFile(t, filepath.Join(base, "in.bin"), content)
	wrong := sum([]byte("expected"))
	in := workflow.Input{Name: "bin", Kind: workflow.InputFile, Source: "in.bin", SHA256: wrong}
	dst := filepath.Join(t.TempDir(), "ws", "in.bin")
	_, err := f.Fetch(context.Background(), in, base, dst)
	if err == nil {
		t.Fatal("a checksum mismatch was accepted")
	}
	for _, want := range []string{"checksum mismatch", "expected sha256 " + wrong, "got " + sum(content), `input "bin"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := os.Lstat(dst); err == nil {
		t.Error("something was left at dst")
	}
	if left, _ := os.ReadDir(filepath.Dir(dst)); len(left) != 0 {
		t.Errorf("the workspace holds %v", left)
	}
	if files := storeFiles(t, f.Store); len(files) != 0 {
		t.Errorf("the store holds %v after a mismatch", files)
	}
}

func TestFileInputDirectory(t *testing.T) {
	f := newFetcher(t)
	base := t.TempDir()
	writeFile(t, filepath.Join(base, "src", "a.txt"), []byte("a"))
	writeFile(t, filepath.Join(base, "src", "sub", "b.txt"), []byte("b"))
	in := workflow.Input{Name: "src", Kind: workflow.InputFile, Source: "src"}
	dst := filepath.Join(t.TempDir(), "src")
	got, err := f.Fetch(context.Background(), in, base, dst)
	if err != nil {
		t.Fatal(err)
	}
	if got.Input.Format != record.FormatNAR {
		t.Fatalf("format %q, want nar", got.Input.Format)
	}
	h, _, err := f.Store.PutNAR(filepath.Join(base, "src"))
	if err != nil || h.Blob() != got.Input.Digest {
		t.Fatalf("recorded %v, the source's NAR hash is %v (%v)", got.Input.Digest, h, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "sub", "b.txt")); string(b) != "b" {
		t.Fatalf("dst/sub/b.txt = %q", b)
	}
	in.SHA256 = sum([]byte("x"))
	if _, err := f.Fetch(context.Background(), in, base, filepath.Join(t.TempDir(), "x")); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Fatalf("sha256 on a directory: %v", err)
	}
}

func TestFileInputRejectsRemoteSource(t *testing.T) {
	f := newFetcher(t)
	in := workflow.Input{Name: "x", Kind: workflow.InputFile, Source: "https://example.invalid/x"}
	if _, err := f.Fetch(context.Background(), in, t.TempDir(), filepath.Join(t.TempDir(), "x")); err == nil || !strings.Contains(err.Error(), "not a local path") {
		t.Fatalf("a URL as a file source: %v", err)
	}
}

// server serves files on 127.0.0.1 and counts requests.
func server(t *testing.T, files map[string][]byte) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestHTTPInput(t *testing.T) {
	body := []byte("model weights")
	srv, hits := server(t, map[string][]byte{"/m.bin": body, "/bad.bin": []byte("not the weights")})
	f := newFetcher(t)
	f.HTTPClient = srv.Client()
	in := workflow.Input{Name: "m", Kind: workflow.InputHTTP, Source: srv.URL + "/m.bin", SHA256: sum(body)}
	ws := t.TempDir()
	got, err := f.Fetch(context.Background(), in, "", filepath.Join(ws, "m.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(got.Path); !bytes.Equal(b, body) || got.Cached {
		t.Fatalf("dst holds %q, cached %v", b, got.Cached)
	}
	first := hits.Load()
	again, err := f.Fetch(context.Background(), in, "", filepath.Join(ws, "m2.bin"))
	if err != nil || !again.Cached || hits.Load() != first {
		t.Fatalf("second fetch: %+v, %v; server hit %d times (was %d); want a cache hit", again, err, hits.Load(), first)
	}
	if b, _ := os.ReadFile(again.Path); !bytes.Equal(b, body) {
		t.Fatalf("cached copy holds %q", b)
	}

	expected := []byte("the weights we meant")
	bad := workflow.Input{Name: "bad", Kind: workflow.InputHTTP, Source: srv.URL + "/bad.bin", SHA256: sum(expected)}
	before := storeFiles(t, f.Store)
	dst := filepath.Join(ws, "bad.bin")
	_, err = f.Fetch(context.Background(), bad, "", dst)
	if err == nil || !strings.Contains(err.Error(), "expected sha256 "+sum(expected)) || !strings.Contains(err.Error(), "got "+sum([]byte("not the weights"))) {
		t.Fatalf("bad checksum: %v", err)
	}
	if _, err := os.Lstat(dst); err == nil {
		t.Fatal("a bad download was left at dst")
	}
	if after := storeFiles(t, f.Store); len(after) != len(before) {
		t.Fatalf("a bad download was left in the store: %v", after)
	}

	nosum := workflow.Input{Name: "n", Kind: workflow.InputHTTP, Source: srv.URL + "/m.bin"}
	if _, err := f.Fetch(context.Background(), nosum, "", filepath.Join(ws, "n")); err == nil || !strings.Contains(err.Error(), "no sha256") {
		t.Fatalf("http without sha256: %v", err)
	}
	missing := workflow.Input{Name: "g", Kind: workflow.InputHTTP, Source: srv.URL + "/gone", SHA256: sum([]byte("gone"))}
	if _, err := f.Fetch(context.Background(), missing, "", filepath.Join(ws, "g")); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("404: %v", err)
	}
}

type tarEntry struct {
	name, link string
	body       string
}

func tarGz(t *testing.T, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: tar.TypeReg}
		if e.link != "" {
			h = &tar.Header{Name: e.name, Linkname: e.link, Typeflag: tar.TypeSymlink, Mode: 0o777}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestArchiveInputs(t *testing.T) {
	good := tarGz(t, []tarEntry{{name: "d/a.txt", body: "A"}, {name: "b.txt", body: "B"}})
	linked := tarGz(t, []tarEntry{{name: "a.txt", body: "A"}, {name: "l", link: "a.txt"}})
	many := tarGz(t, []tarEntry{{name: "1", body: "1"}, {name: "2", body: "2"}, {name: "3", body: "3"}})
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(bytes.Repeat([]byte("x"), 100))
	zw.Close()
	srv, _ := server(t, map[string][]byte{"/good.tar.gz": good, "/linked.tgz": linked, "/many.tar.gz": many, "/big.txt.gz": gz.Bytes(), "/raw.tar.gz": good})
	f := newFetcher(t)
	f.HTTPClient = srv.Client()
	f.Limits = Limits{MaxDownload: 1 << 20, MaxBytes: 50, MaxFiles: 2}
	ws := t.TempDir()
	fetch := func(path string, body []byte) (Fetched, error) {
		in := workflow.Input{Name: "a", Kind: workflow.InputHTTP, Source: srv.URL + path, SHA256: sum(body)}
		return f.Fetch(context.Background(), in, "", filepath.Join(ws, strings.Trim(path, "/?=")))
	}
	got, err := fetch("/good.tar.gz", good)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(got.Path, "d", "a.txt")); string(b) != "A" || !got.Unpacked {
		t.Fatalf("unpacked d/a.txt = %q, Unpacked %v", b, got.Unpacked)
	}
	if got.Input.Digest.Hex() != sum(good) {
		t.Fatal("an archive's digest must be the sha256 of the archive as downloaded")
	}
	got, err = fetch("/raw.tar.gz?archive=false", good)
	if err != nil || got.Unpacked {
		t.Fatalf("?archive=false: %+v, %v", got, err)
	}
	for path, want := range map[string]string{
		"/linked.tgz":  "links",
		"/many.tar.gz": "file-count limit",
		"/big.txt.gz":  "size limit",
	} {
		body := map[string][]byte{"/linked.tgz": linked, "/many.tar.gz": many, "/big.txt.gz": gz.Bytes()}[path]
		_, err := fetch(path, body)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an error about %s", path, err, want)
		}
		if _, err := os.Lstat(filepath.Join(ws, strings.Trim(path, "/"))); err == nil {
			t.Errorf("%s: a refused archive was left at dst", path)
		}
	}
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestGitInputPinnedByCommit(t *testing.T) {
	testtierCommand(t, "git")
	repo := t.TempDir()
	git(t, repo, "init", "-q")
	writeFile(t, filepath.Join(repo, "train.py"), []byte("print('v1')\n"))
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-q", "-m", "v1")
	first := git(t, repo, "rev-parse", "HEAD")
	writeFile(t, filepath.Join(repo, "train.py"), []byte("print('v2')\n"))
	writeFile(t, filepath.Join(repo, "extra.txt"), []byte("later"))
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-q", "-m", "v2")

	f := newFetcher(t)
	in := workflow.Input{Name: "code", Kind: workflow.InputGit, Source: "git::file://" + repo, Commit: first}
	ws := t.TempDir()
	got, err := f.Fetch(context.Background(), in, "", filepath.Join(ws, "code"))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(got.Path, "train.py")); string(b) != "print('v1')\n" {
		t.Fatalf("train.py at the pinned commit = %q", b)
	}
	for _, gone := range []string{"extra.txt", ".git"} {
		if _, err := os.Lstat(filepath.Join(got.Path, gone)); err == nil {
			t.Errorf("%s present in the checkout of the first commit", gone)
		}
	}
	if got.Input.Commit != first || got.Input.Format != record.FormatNAR || got.Cached {
		t.Fatalf("Fetched = %+v", got)
	}
	h, _, err := f.Store.PutNAR(got.Path)
	if err != nil || h.Blob() != got.Input.Digest {
		t.Fatalf("placed tree hashes to %v, recorded %v (%v)", h, got.Input.Digest, err)
	}
	again, err := f.Fetch(context.Background(), in, "", filepath.Join(ws, "code2"))
	if err != nil || !again.Cached || again.Input.Digest != got.Input.Digest {
		t.Fatalf("second fetch: %+v, %v; want a cache hit by commit", again, err)
	}

	for name, commit := range map[string]string{
		"short":   first[:12],
		"unknown": strings.Repeat("0", 40),
		"upper":   strings.ToUpper(first),
	} {
		bad := in
		bad.Commit = commit
		dst := filepath.Join(ws, "bad-"+name)
		_, err := f.Fetch(context.Background(), bad, "", dst)
		if err == nil || !strings.Contains(err.Error(), commit) {
			t.Errorf("%s commit %q: %v; want an error naming the commit", name, commit, err)
		}
		t.Logf("%s commit: %v", name, err)
		if _, err := os.Lstat(dst); err == nil {
			t.Errorf("%s commit left %s behind", name, dst)
		}
	}
	withRef := in
	withRef.Source += "?ref=master"
	if _, err := f.Fetch(context.Background(), withRef, "", filepath.Join(ws, "r")); err == nil || !strings.Contains(err.Error(), "pinned by commit") {
		t.Errorf("source with ?ref=: %v", err)
	}
}

// TestFileInputOutsideRefused: a file input may not read outside the
// workflow's directory, by ".." or through a symlink, even when its
// sha256 is pinned, unless the fetcher allows it.
func TestFileInputOutsideRefused(t *testing.T) {
	top := t.TempDir()
	base := filepath.Join(top, "wf")
	secret := []byte("host secret\n")
	writeFile(t, filepath.Join(top, "secret"), secret)
	writeFile(t, filepath.Join(top, "outdir", "s.txt"), secret)
	writeFile(t, filepath.Join(base, "data", "ok.txt"), []byte("ok\n"))
	for _, l := range [][2]string{
		{"../secret", "link-file"},
		{"../outdir", "link-dir"},
		{"/", "link-root"},
		{"data", "link-inside"},
	} {
		if err := os.Symlink(l[0], filepath.Join(base, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name, source string
		pinned       bool
	}{
		{"dotdot pinned", "../secret", true},
		{"dotdot unpinned", "../secret", false},
		{"dotdot inside a path", "data/../../secret", true},
		{"absolute file URL", "file://" + filepath.Join(top, "secret"), true},
		{"symlink to a file outside", "link-file", true},
		{"symlink to a directory outside", "link-dir", false},
		{"through a symlinked directory", "link-dir/s.txt", true},
		{"through a symlink to /", "link-root/etc/hostname", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFetcher(t)
			in := workflow.Input{Name: "x", Kind: workflow.InputFile, Source: c.source}
			if c.pinned {
				in.SHA256 = sum(secret)
			}
			dst := filepath.Join(t.TempDir(), "x")
			_, err := f.Fetch(context.Background(), in, base, dst)
			if !errors.Is(err, ErrOutside) || !strings.Contains(err.Error(), "--allow-outside-inputs") {
				t.Fatalf("Fetch(%q) = %v, want ErrOutside naming the flag", c.source, err)
			}
			if _, err := os.Lstat(dst); err == nil {
				t.Error("something was placed at dst")
			}
			if files := storeFiles(t, f.Store); len(files) != 0 {
				t.Errorf("the store holds %v", files)
			}
		})
	}

	// A symlink that stays inside is followed.
	f := newFetcher(t)
	in := workflow.Input{Name: "x", Kind: workflow.InputFile, Source: "link-inside/ok.txt", SHA256: sum([]byte("ok\n"))}
	got, err := f.Fetch(context.Background(), in, base, filepath.Join(t.TempDir(), "x"))
	if err != nil {
		t.Fatalf("a symlink inside the directory: %v", err)
	}
	if b, _ := os.ReadFile(got.Path); string(b) != "ok\n" {
		t.Errorf("placed %q", b)
	}

	// The caller may allow outside sources.
	f = newFetcher(t)
	f.AllowOutside = true
	in = workflow.Input{Name: "x", Kind: workflow.InputFile, Source: "../secret", SHA256: sum(secret)}
	if got, err = f.Fetch(context.Background(), in, base, filepath.Join(t.TempDir(), "x")); err != nil {
		t.Fatalf("allowed outside source: %v", err)
	}
	if b, _ := os.ReadFile(got.Path); !bytes.Equal(b, secret) {
		t.Errorf("placed %q", b)
	}

	// An API caller's workflow is confined whatever AllowOutside says
	// (serve --allow-outside-inputs is for the operator's workflows).
	for _, source := range []string{"../secret", "link-file", "link-dir/s.txt"} {
		f = newFetcher(t)
		f.AllowOutside = true
		f.Confine = &Confinement{}
		in = workflow.Input{Name: "x", Kind: workflow.InputFile, Source: source, SHA256: sum(secret)}
		_, err := f.Fetch(context.Background(), in, base, filepath.Join(t.TempDir(), "x"))
		if !errors.Is(err, ErrOutside) || strings.Contains(err.Error(), "--allow-outside-inputs") {
			t.Errorf("confined, AllowOutside: Fetch(%q) = %v, want ErrOutside without the flag's hint", source, err)
		}
	}
}

// TestFileInputSpecialFilesRefused: a FIFO (which would hang the host on
// open) or a device is not read.
func TestFileInputSpecialFilesRefused(t *testing.T) {
	base := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(base, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(base, "zero")); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{"fifo", "zero"} {
		f := newFetcher(t)
		in := workflow.Input{Name: "x", Kind: workflow.InputFile, Source: src}
		done := make(chan error, 1)
		go func() {
			_, err := f.Fetch(context.Background(), in, base, filepath.Join(t.TempDir(), "x"))
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !(strings.Contains(err.Error(), "regular files or directories") || errors.Is(err, ErrOutside)) {
				t.Errorf("Fetch(%s) = %v, want a refusal", src, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Fetch(%s) hangs", src)
		}
	}
}
