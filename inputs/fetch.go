// Package inputs fetches a workflow's inputs with go-getter, checks them
// against their pins, keeps them in the record store's blob store, and
// places them in a step's workspace.
//
// Only three getters are allowed, one per input kind:
//   - file: a local path relative to the workflow file, always copied (the
//     go-getter default is a symlink). A file may be pinned by sha256; a
//     directory is recorded by its NAR hash. The path must resolve beneath
//     the workflow's directory, also through symlinks (it is opened with
//     an os.Root there), unless Fetcher.AllowOutside is set: the host reads
//     inputs with the caller's rights and places them where a job reads
//     them.
//   - git: a git:: URL pinned by a full 40-hex commit. After checkout the
//     fetcher checks that HEAD is that commit, drops .git and records the
//     tree's NAR hash.
//   - http(s): a URL pinned by sha256; a download that does not match is
//     removed and the error shows the expected and the actual digest.
//
// The fetcher hashes everything itself after the download instead of
// trusting go-getter's checksum handling (which leaves a bad file behind
// and cannot hash directories). Archives (tar, tar.gz, zip, ...) are
// checksummed as downloaded, then unpacked with size and file-count limits;
// archives holding symlinks or hard links are refused, because go-getter
// would turn them into empty files.
//
// Every fetched input is stored as a blob: files by their sha256, trees as
// NARs by their NAR hash, and git commits map to their tree's NAR through a
// ref. A second fetch of the same pinned input is served from the store
// without touching the network.
//
// A workflow that someone other than the operator wrote (an API caller's,
// sent to the server) is fetched under a Confinement (Fetcher.Confine,
// confine.go): files beneath the base directory only, always read; git
// only over the schemes it allows, http(s) through a loopback proxy of
// the fetch's own; every http(s) and git connection to an address the
// egress rules accept, judged after DNS and dialled as that literal; no
// stored content served by its pin unless the caller owns it.
package inputs

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	getter "github.com/hashicorp/go-getter/v2"

	"github.com/agentsandbox/agentsandbox/fsx/jobfs"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Limits bound what one input may download and unpack to. Zero fields take
// the DefaultLimits value.
type Limits struct {
	// MaxDownload caps an HTTP download, in bytes.
	MaxDownload int64
	// MaxBytes caps the total unpacked size of an archive, in bytes.
	MaxBytes int64
	// MaxFiles caps the number of entries of an archive.
	MaxFiles int
}

// ErrChecksum marks an input whose content does not match its pin: the
// workflow (or the source) is wrong, not the machine.
var ErrChecksum = errors.New("checksum mismatch")

// ErrOutside marks a file input whose source resolves outside the
// workflow's directory, by ".." or through a symlink, when that is not
// allowed (Fetcher.AllowOutside).
var ErrOutside = errors.New("source outside the workflow's directory")

// DefaultLimits: 4 GiB downloads, 16 GiB and 100000 entries unpacked.
var DefaultLimits = Limits{MaxDownload: 4 << 30, MaxBytes: 16 << 30, MaxFiles: 100_000}

// Fetcher fetches inputs into a record store.
type Fetcher struct {
	Store  *record.Store
	Limits Limits
	// HTTPClient is used for http inputs; nil means go-cleanhttp's default.
	HTTPClient *http.Client
	// Git is the git command; empty means "git" from PATH.
	Git string
	// AllowOutside accepts file inputs that resolve outside the workflow's
	// directory (apply --allow-outside-inputs). Without it such an input
	// fails with ErrOutside.
	AllowOutside bool
	// Confine, when set, is the input policy of the workflow's author:
	// an API caller's (see Confinement). nil is the operator's own
	// workflow, fetched as described in the package doc.
	Confine *Confinement
	// Resolve and Dial are how a confined fetch resolves names and dials
	// the addresses it accepted (always address:port literals); nil is
	// the host's resolver and a plain dialer.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	Dial    func(ctx context.Context, network, address string) (net.Conn, error)
}

// Fetched is one input placed at its destination.
type Fetched struct {
	// Input is what the record keeps: kind, source, commit, and the
	// digest (sha256 of a file, NAR hash of a tree) that is also the key
	// of its blob.
	Input record.Input
	// Path is where the input now is (the dst given to Fetch).
	Path string
	// Cached is true when the content came from the store, not the source.
	Cached bool
	// Unpacked is true when an archive was unpacked at Path.
	Unpacked bool
}

var (
	hex64  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	hex40  = regexp.MustCompile(`^[0-9a-f]{40}$`)
	schema = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// Fetch gets input in (file sources are relative to baseDir, the workflow
// file's directory), checks its pin, stores it in the blob store, and places
// it at dst: a file is copied there, an archive unpacked there, a directory
// or git tree restored there. dst must not exist; its parent is created.
// On any error nothing is left at dst and nothing unverified in the store.
func (f *Fetcher) Fetch(ctx context.Context, in workflow.Input, baseDir, dst string) (Fetched, error) {
	if f.Store == nil {
		return Fetched{}, fmt.Errorf("fetch input %q: no store", in.Name)
	}
	if _, err := os.Lstat(dst); err == nil {
		return Fetched{}, fmt.Errorf("fetch input %q: destination %s already exists; inputs go into a fresh workspace", in.Name, dst)
	}
	// go-getter resolves file sources against an absolute directory only.
	baseDir, err := filepath.Abs(baseDir)
	if err != nil {
		return Fetched{}, fmt.Errorf("fetch input %q: %w", in.Name, err)
	}
	if err := f.Confine.Check(in); err != nil {
		return Fetched{}, fmt.Errorf("fetch %w", err)
	}
	var res Fetched
	switch in.Kind {
	case workflow.InputFile:
		res, err = f.fetchFile(ctx, in, baseDir)
	case workflow.InputHTTP:
		res, err = f.fetchHTTP(ctx, in)
	case workflow.InputGit:
		res, err = f.fetchGit(ctx, in)
	default:
		err = fmt.Errorf("unknown kind %q; use file, git or http", in.Kind)
	}
	if err != nil {
		return Fetched{}, fmt.Errorf("fetch input %q: %w", in.Name, err)
	}
	res.Input.Name, res.Input.Kind, res.Input.Source = in.Name, string(in.Kind), in.Source
	res.Path = dst
	if err := f.place(res, in.Source, dst); err != nil {
		return Fetched{}, fmt.Errorf("fetch input %q: place at %s: %w", in.Name, dst, err)
	}
	res.Unpacked = res.Input.Format == record.FormatFile && archiveKind(in.Source) != ""
	return res, nil
}

// wantSHA256 parses the pinned sha256, if any.
func wantSHA256(in workflow.Input) (record.Digest, bool, error) {
	if in.SHA256 == "" {
		return record.Digest{}, false, nil
	}
	if !hex64.MatchString(in.SHA256) {
		return record.Digest{}, false, fmt.Errorf("sha256 %q is not 64 lowercase hex digits", in.SHA256)
	}
	d, err := record.ParseDigest(in.SHA256)
	return d, err == nil, err
}

func (f *Fetcher) fetchFile(ctx context.Context, in workflow.Input, baseDir string) (Fetched, error) {
	src, _ := strings.CutPrefix(in.Source, "file::")
	if strings.Contains(src, "::") || (schema.MatchString(src) && !strings.HasPrefix(src, "file:")) {
		return Fetched{}, fmt.Errorf("source %q is not a local path; use kind git or http for remote sources", in.Source)
	}
	path := strings.TrimPrefix(src, "file://")
	if u, err := url.Parse(src); err == nil && u.Scheme == "file" {
		path = u.Path
	}
	path, _, _ = strings.Cut(path, "?")
	if !filepath.IsAbs(path) {
		path = filepath.Join(baseDir, path)
	}
	want, pinned, err := wantSHA256(in)
	if err != nil {
		return Fetched{}, err
	}
	if !f.AllowOutside || f.Confine != nil {
		return f.fetchFileBeneath(in, baseDir, path, want, pinned)
	}
	if pinned && f.Store.HasBlob(want) {
		return cachedFile(want, f.Store)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return Fetched{}, fmt.Errorf("source: %w", err)
	}
	if fi.IsDir() {
		if pinned {
			return Fetched{}, fmt.Errorf("source %s is a directory and sha256 pins only files; remove sha256 (directories are recorded by NAR hash) or point at an archive", path)
		}
		// go-getter's file getter symlinks directories even with Copy
		// set, so a directory is copied by serialising it as a NAR into
		// the store; place restores it from there.
		h, n, err := f.Store.PutNAR(path)
		if err != nil {
			return Fetched{}, err
		}
		return Fetched{Input: record.Input{Format: record.FormatNAR, Digest: h.Blob(), Size: n}}, nil
	}
	return f.viaGetter(ctx, in, path, []getter.Getter{new(getter.FileGetter)}, want, pinned)
}

// outsideError is the ErrOutside error for source.
func (f *Fetcher) outsideError(source, baseDir, why string) error {
	if f.Confine != nil {
		return fmt.Errorf("%w: source %q %s, and an API caller's file inputs are read only from beneath the server's template directory", ErrOutside, source, why)
	}
	return fmt.Errorf("%w %s: source %q %s; move the file there, or pass --allow-outside-inputs to apply", ErrOutside, baseDir, source, why)
}

// stored reports whether the content pinned by d may be served from the
// store without its source being read: always for the operator's own
// workflows, for a confined fetch only what the caller owns.
func (f *Fetcher) stored(d record.Digest) bool {
	return f.Store.HasBlob(d) && (f.Confine == nil || f.Confine.owns(d))
}

// fetchFileBeneath is fetchFile for a source that must resolve beneath
// baseDir: it opens the source through an os.Root at baseDir, which refuses
// ".." and symlinks that lead out, and reads the file or directory it
// opened, so a symlink swapped in after the check does not lead elsewhere
// either. Only regular files and directories are read: never a FIFO (which
// would hang) or a device.
func (f *Fetcher) fetchFileBeneath(in workflow.Input, baseDir, path string, want record.Digest, pinned bool) (Fetched, error) {
	rel, err := filepath.Rel(baseDir, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return Fetched{}, f.outsideError(in.Source, baseDir, "leaves it with ..")
	}
	root, err := os.OpenRoot(baseDir)
	if err != nil {
		return Fetched{}, fmt.Errorf("open the workflow's directory: %w", err)
	}
	defer root.Close()
	// O_NONBLOCK: opening a FIFO must not wait for a writer. It changes
	// nothing for regular files and directories.
	fh, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if pinned && errors.Is(err, fs.ErrNotExist) && f.stored(want) {
			return cachedFile(want, f.Store) // the source may go away once stored
		}
		if strings.Contains(err.Error(), "escapes from parent") {
			return Fetched{}, f.outsideError(in.Source, baseDir, "leads out of it through a symlink")
		}
		if f.Confine != nil && errors.Is(err, fs.ErrNotExist) {
			// The same words whether or not the store holds the pin.
			return Fetched{}, fmt.Errorf("%w: %q is not in the server's template directory; an API caller's file inputs are read from there, never from the server's store", ErrNoSource, in.Source)
		}
		return Fetched{}, fmt.Errorf("source: %w", err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return Fetched{}, fmt.Errorf("source: %w", err)
	}
	switch {
	case fi.IsDir():
		if pinned {
			return Fetched{}, fmt.Errorf("source %s is a directory and sha256 pins only files; remove sha256 (directories are recorded by NAR hash) or point at an archive", path)
		}
		// The NAR is written from the directory's real path, read back
		// from the descriptor the os.Root opened: it lies beneath
		// baseDir. Symlinks inside it are stored as symlinks, never
		// followed.
		real, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fh.Fd()))
		if err != nil {
			return Fetched{}, fmt.Errorf("source: resolve %s: %w", path, err)
		}
		h, n, err := f.Store.PutNAR(real)
		if err != nil {
			return Fetched{}, err
		}
		return Fetched{Input: record.Input{Format: record.FormatNAR, Digest: h.Blob(), Size: n}}, nil
	case !fi.Mode().IsRegular():
		return Fetched{}, fmt.Errorf("source %s is a %s; file inputs are regular files or directories", path, fi.Mode().Type())
	}
	if pinned && f.stored(want) {
		return cachedFile(want, f.Store)
	}
	stage, err := f.Store.TempDir("fetch-")
	if err != nil {
		return Fetched{}, err
	}
	defer os.RemoveAll(stage)
	dl := filepath.Join(stage, "content")
	w, err := os.OpenFile(dl, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return Fetched{}, err
	}
	if _, err := io.Copy(w, fh); err != nil {
		w.Close()
		return Fetched{}, fmt.Errorf("copy %s: %w", path, err)
	}
	if err := w.Close(); err != nil {
		return Fetched{}, err
	}
	return f.storeStaged(stage, dl, path, want, pinned)
}

func (f *Fetcher) fetchHTTP(ctx context.Context, in workflow.Input) (Fetched, error) {
	src, _ := strings.CutPrefix(in.Source, "http::")
	u, err := url.Parse(src)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Fetched{}, fmt.Errorf("source %q is not an http(s) URL", in.Source)
	}
	if u.Query().Has("checksum") {
		return Fetched{}, fmt.Errorf("source %q carries a checksum parameter; pin it with the input's sha256 instead", in.Source)
	}
	want, pinned, err := wantSHA256(in)
	if err != nil {
		return Fetched{}, err
	}
	if !pinned {
		return Fetched{}, fmt.Errorf("http input has no sha256; add `sha256: <hex>` (sha256sum of the file) so the download is pinned")
	}
	if f.stored(want) {
		return cachedFile(want, f.Store)
	}
	hg := &getter.HttpGetter{
		Netrc:                 false,
		XTerraformGetDisabled: true,
		DoNotCheckHeadFirst:   true,
		ReadTimeout:           30 * time.Minute,
		MaxBytes:              f.limits().MaxDownload,
		Client:                f.HTTPClient,
	}
	if f.Confine == nil {
		return f.viaGetter(ctx, in, src, []getter.Getter{hg}, want, true)
	}
	g := &guard{f: f, c: f.Confine}
	hg.Client = g.httpClient()
	res, err := f.viaGetter(ctx, in, src, []getter.Getter{hg}, want, true)
	if refusal := g.refused(); err != nil && refusal != nil {
		// What the policy refused, not what the HTTP client made of it.
		return Fetched{}, fmt.Errorf("get %s: %w", src, refusal)
	}
	return res, err
}

func cachedFile(d record.Digest, s *record.Store) (Fetched, error) {
	fi, err := os.Stat(s.BlobPath(d))
	if err != nil {
		return Fetched{}, err
	}
	return Fetched{Input: record.Input{Format: record.FormatFile, Digest: d, Size: fi.Size()}, Cached: true}, nil
}

func (f *Fetcher) limits() Limits {
	l := f.Limits
	if l.MaxDownload <= 0 {
		l.MaxDownload = DefaultLimits.MaxDownload
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultLimits.MaxBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultLimits.MaxFiles
	}
	return l
}

// viaGetter downloads src into a staging directory with only the given
// getters and no decompressors, checks the sha256 (when pinned) and stores
// the result as a blob (a file) or a NAR (a directory).
func (f *Fetcher) viaGetter(ctx context.Context, in workflow.Input, src string, getters []getter.Getter, want record.Digest, pinned bool) (Fetched, error) {
	stage, err := f.Store.TempDir("fetch-")
	if err != nil {
		return Fetched{}, err
	}
	defer os.RemoveAll(stage)
	dl := filepath.Join(stage, "content")
	client := &getter.Client{
		Getters:         getters,
		Decompressors:   map[string]getter.Decompressor{}, // unpack later, from the verified blob
		DisableSymlinks: true,
	}
	req := &getter.Request{Src: src, Dst: dl, GetMode: getter.ModeFile, Copy: true, DisableSymlinks: true}
	if _, err := client.Get(ctx, req); err != nil {
		if errors.Is(err, getter.ErrSymlinkCopy) {
			return Fetched{}, fmt.Errorf("get %s: it contains a symlink, which file inputs do not copy: %w", src, err)
		}
		if errors.Is(err, io.ErrShortWrite) {
			return Fetched{}, fmt.Errorf("get %s: the download stopped short: it is larger than the %d-byte download limit, or the connection dropped: %w", src, f.limits().MaxDownload, err)
		}
		return Fetched{}, fmt.Errorf("get %s: %w", src, err)
	}
	if fi, err := os.Lstat(dl); err != nil || !fi.Mode().IsRegular() {
		return Fetched{}, fmt.Errorf("get %s: the getter did not leave a regular file (%v)", src, err)
	}
	return f.storeStaged(stage, dl, src, want, pinned)
}

// storeStaged checks the file dl in the staging directory stage against the
// pin and stores it as a blob; on a mismatch it removes stage.
func (f *Fetcher) storeStaged(stage, dl, src string, want record.Digest, pinned bool) (Fetched, error) {
	got, err := sha256File(dl)
	if err != nil {
		return Fetched{}, err
	}
	if pinned && got != want && f.Confine != nil {
		// The caller learns that it does not match, not what it is.
		os.RemoveAll(stage)
		return Fetched{}, fmt.Errorf("%w for %s: it does not match the pinned sha256 %s; what was read was removed (fix the input's sha256 if the source changed on purpose)", ErrChecksum, src, want.Hex())
	}
	if pinned && got != want {
		os.RemoveAll(stage)
		return Fetched{}, fmt.Errorf("%w for %s: expected sha256 %s, got %s; the downloaded file was removed (fix the input's sha256 if the source changed on purpose)", ErrChecksum, src, want.Hex(), got.Hex())
	}
	fh, err := os.Open(dl)
	if err != nil {
		return Fetched{}, err
	}
	defer fh.Close()
	d, n, err := f.Store.PutBlob(fh)
	if err != nil {
		return Fetched{}, err
	}
	if d != got {
		return Fetched{}, fmt.Errorf("%s changed while it was stored (sha256 %s, then %s)", src, got.Hex(), d.Hex())
	}
	return Fetched{Input: record.Input{Format: record.FormatFile, Digest: d, Size: n}}, nil
}

func sha256File(path string) (record.Digest, error) {
	fh, err := os.Open(path)
	if err != nil {
		return record.Digest{}, err
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return record.Digest{}, err
	}
	var d record.Digest
	h.Sum(d[:0])
	return d, nil
}

func (f *Fetcher) fetchGit(ctx context.Context, in workflow.Input) (Fetched, error) {
	if !hex40.MatchString(in.Commit) {
		return Fetched{}, fmt.Errorf("commit %q is not a full 40-hex commit; git inputs are pinned by the full commit (git rev-parse HEAD)", in.Commit)
	}
	if in.SHA256 != "" {
		return Fetched{}, errors.New("git inputs are pinned by commit, not sha256; remove sha256")
	}
	src := in.Source
	if !strings.HasPrefix(src, "git::") {
		return Fetched{}, fmt.Errorf("source %q: git sources start with git:: (such as git::https://host/repo.git)", in.Source)
	}
	u, err := url.Parse(strings.TrimPrefix(src, "git::"))
	if err != nil || u.Scheme == "" {
		return Fetched{}, fmt.Errorf("source %q: not a URL after git::", in.Source)
	}
	q := u.Query()
	for _, k := range []string{"ref", "depth", "sshkey"} {
		if q.Has(k) {
			return Fetched{}, fmt.Errorf("source %q sets %q; git inputs are pinned by commit only", in.Source, k)
		}
	}
	if d, ok, err := f.Store.Ref("git", in.Commit); err != nil {
		return Fetched{}, err
	} else if ok && (f.Confine == nil || f.Confine.owns(d)) {
		fi, err := os.Stat(f.Store.BlobPath(d))
		if err != nil {
			return Fetched{}, err
		}
		return Fetched{Input: record.Input{Commit: in.Commit, Format: record.FormatNAR, Digest: d, Size: fi.Size()}, Cached: true}, nil
	}
	remote := u.String()
	q.Set("ref", in.Commit)
	u.RawQuery = q.Encode()
	stage, err := f.Store.TempDir("git-")
	if err != nil {
		return Fetched{}, err
	}
	defer os.RemoveAll(stage)
	repo := filepath.Join(stage, "repo")
	if s := gitScheme(in.Source); f.Confine != nil && (s == "http" || s == "https") {
		if err := f.gitConfined(ctx, in, remote, stage, repo); err != nil {
			return Fetched{}, err
		}
	} else {
		client := &getter.Client{
			Getters:         []getter.Getter{&getter.GitGetter{Timeout: 30 * time.Minute}},
			Decompressors:   map[string]getter.Decompressor{},
			DisableSymlinks: true,
		}
		req := &getter.Request{Src: "git::" + u.String(), Dst: repo, GetMode: getter.ModeDir}
		if _, err := client.Get(ctx, req); err != nil {
			return Fetched{}, fmt.Errorf("git checkout of %s at %s: %w", in.Source, in.Commit, err)
		}
	}
	git := f.Git
	if git == "" {
		git = "git"
	}
	out, err := exec.CommandContext(ctx, git, "-C", repo, "rev-parse", "HEAD").CombinedOutput()
	if err != nil {
		return Fetched{}, fmt.Errorf("git -C %s rev-parse HEAD: %w: %s", repo, err, out)
	}
	if head := strings.TrimSpace(string(out)); head != in.Commit {
		return Fetched{}, fmt.Errorf("checked out %s but HEAD is %s; the commit does not resolve to itself", in.Commit, head)
	}
	if err := removeGitDirs(repo); err != nil {
		return Fetched{}, err
	}
	h, n, err := f.Store.PutNAR(repo)
	if err != nil {
		return Fetched{}, err
	}
	// The commit's tree is served from the store to later fetches of the
	// commit, from any source; what an API caller's server gave is not
	// trusted that far.
	if f.Confine == nil {
		if err := f.Store.PutRef("git", in.Commit, h.Blob()); err != nil {
			return Fetched{}, err
		}
	}
	return Fetched{Input: record.Input{Commit: in.Commit, Format: record.FormatNAR, Digest: h.Blob(), Size: n}}, nil
}

// removeGitDirs drops every .git entry (the repository and submodule
// links), so the recorded tree is the checked-out content alone.
func removeGitDirs(root string) error {
	var gits []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == ".git" {
			gits = append(gits, p)
			if d.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("scan checkout: %w", err)
	}
	for _, g := range gits {
		if err := os.RemoveAll(g); err != nil {
			return fmt.Errorf("remove %s: %w", g, err)
		}
	}
	return nil
}

// place puts the stored content of res at dst. A tree is restored from its
// NAR beneath dst's parent through jobfs: what the NAR holds (it may come
// from a store received from elsewhere) is written without following any
// symlink, and a NAR that is not a well-formed tree is refused.
func (f *Fetcher) place(res Fetched, source, dst string) error {
	parent := filepath.Dir(dst)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	if res.Input.Format == record.FormatNAR {
		root, err := jobfs.OpenRestorer(parent)
		if err != nil {
			return err
		}
		defer root.Close()
		return f.Store.RestoreNAR(record.NarHash(res.Input.Digest), root, filepath.Base(dst))
	}
	stage, err := os.MkdirTemp(parent, ".tmp-input-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	file := filepath.Join(stage, "file")
	if err := f.copyBlob(res.Input.Digest, file); err != nil {
		return err
	}
	result := file
	if kind := archiveKind(source); kind != "" {
		result = filepath.Join(stage, "unpacked")
		if err := unpack(kind, file, result, f.limits()); err != nil {
			return err
		}
	}
	return os.Rename(result, dst)
}

// copyBlob copies blob d to path, checking its hash on the way.
func (f *Fetcher) copyBlob(d record.Digest, path string) error {
	r, err := f.Store.OpenBlob(d)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}
