package sandboxes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/agentsandbox/agentsandbox/fsx/jobfs"
	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
)

// The files API works on the sandbox's workspace on the host, beneath its
// root and never through a symlink (fsx/jobfs): the job controls
// everything in it. Paths are workspace-relative and slash-separated.

// cleanPath checks an API path: relative, no "..", no NUL, within the
// lengths Linux takes (CheckPathLength).
func cleanPath(p string, rootOK bool) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", Errorf(CodeBadRequest, "path holds a NUL byte")
	}
	if err := CheckPathLength(p); err != nil {
		return "", err
	}
	p = strings.TrimPrefix(p, "/workspace/")
	if p == "" || p == "." || p == "/workspace" {
		if rootOK {
			return ".", nil
		}
		return "", Errorf(CodeBadRequest, "give a path inside the workspace, such as data/input.csv")
	}
	c := path.Clean(p)
	if path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
		return "", Errorf(CodeBadRequest, "path %q leaves the workspace: give a path relative to /workspace", p)
	}
	return c, nil
}

// fsError sorts a jobfs error into the API's codes.
func fsError(p string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &Error{Code: CodeNotFound, Message: fmt.Sprintf("%s: no such file or directory in the workspace", p), Err: err}
	case errors.Is(err, jobfs.ErrSymlink):
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("%s: a symlink is on the way; the files API never follows one (use exec to work with links)", p), Err: err}
	case errors.Is(err, jobfs.ErrOutside):
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("%s: leaves the workspace", p), Err: err}
	case errors.Is(err, jobfs.ErrType):
		return &Error{Code: CodeConflict, Message: fmt.Sprintf("%s: not a regular file or directory (a FIFO, socket or device); the files API does not open those", p), Err: err}
	case errors.Is(err, jobfs.ErrLimit):
		return &Error{Code: CodeTooLarge, Message: err.Error(), Err: err}
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return &Error{Code: CodeTooLarge, Message: fmt.Sprintf("%s: the sandbox's disk is full (resources.disk)", p), Err: err}
	case errors.Is(err, syscall.ENAMETOOLONG):
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("%s: a name on the path is too long for the workspace's filesystem", p), Err: err}
	case errors.Is(err, syscall.ENOTEMPTY):
		return &Error{Code: CodeConflict, Message: fmt.Sprintf("%s: the directory is not empty; remove it recursively (?recursive=1) to remove what it holds too", p), Err: err}
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR):
		return &Error{Code: CodeConflict, Message: fmt.Sprintf("%s: %v", p, err), Err: err}
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Code: CodeInternal, Message: fmt.Sprintf("%s: %v", p, err), Err: err}
}

// root opens the workspace of sandbox id for an action on p, once the
// policy allows it; the decision's id comes back for the record.
func (m *manager) root(ctx context.Context, id, action, p string) (*box, *jobfs.Root, string, error) {
	b, err := m.live(ctx, id)
	if err != nil {
		return nil, nil, "", err
	}
	decision, err := m.authorize(ctx, b, policy.Action{Action: action, Path: p})
	if err != nil {
		return nil, nil, "", err
	}
	r, err := openRoot(b)
	if err != nil {
		return nil, nil, "", err
	}
	return b, r, decision, nil
}

// openRoot opens b's workspace as a jobfs root.
func openRoot(b *box) (*jobfs.Root, error) {
	r, err := jobfs.Open(b.workspacePath())
	if err != nil {
		return nil, fsError(".", err)
	}
	return r, nil
}

func fileInfo(p string, i jobfs.Info) FileInfo {
	t := "other"
	switch i.Kind {
	case jobfs.File:
		t = "file"
	case jobfs.Dir:
		t = "dir"
	case jobfs.Symlink:
		t = "symlink"
	}
	return FileInfo{Path: p, Type: t, Size: i.Size, Mode: fmt.Sprintf("%04o", uint32(i.Mode.Perm())), ModTime: i.ModTime,
		Owner: idName(i.UID, guest.DefaultUID), Group: idName(i.GID, guest.DefaultGID), SymlinkTarget: i.Target}
}

func (m *manager) PutFile(ctx context.Context, id, p string, r io.Reader, mode uint32) (FileInfo, error) {
	p, err := cleanPath(p, false)
	if err != nil {
		return FileInfo{}, err
	}
	if mode == 0 {
		mode = 0o644
	}
	if mode&^0o777 != 0 {
		return FileInfo{}, Errorf(CodeBadRequest, "mode %o: give permission bits only, such as 0644 or 0755", mode)
	}
	b, root, decision, err := m.root(ctx, id, policy.ActionFileWrite, p)
	if err != nil {
		return FileInfo{}, err
	}
	defer root.Close()
	if dir := path.Dir(p); dir != "." {
		if err := root.MkdirAll(dir, 0o755, guest.DefaultUID, guest.DefaultGID); err != nil {
			return FileInfo{}, fsError(dir, err)
		}
	}
	// The file appears at p only once it is whole: a put refused midway
	// (the disk's quota, the size limit, a body that broke off) leaves
	// what was at p as it was.
	f, err := root.CreatePending(p, fs.FileMode(mode), guest.DefaultUID, guest.DefaultGID)
	if err != nil {
		return FileInfo{}, fsError(p, err)
	}
	defer f.Abort()
	h := sha256.New()
	lr := &io.LimitedReader{R: r, N: MaxFileBytes + 1}
	// The bytes go to the file, the hash and the blob store at once: the
	// record keeps what was written.
	d, n, perr := b.sb.Store().PutBlob(io.TeeReader(io.TeeReader(lr, h), f))
	switch {
	case perr != nil:
		return FileInfo{}, fsError(p, perr)
	case n > MaxFileBytes:
		return FileInfo{}, Errorf(CodeTooLarge, "%s: over %d bytes, the most one put takes", p, int64(MaxFileBytes))
	}
	if err := f.Commit(); err != nil {
		return FileInfo{}, fsError(p, err)
	}
	info, err := root.Lstat(p)
	if err != nil {
		return FileInfo{}, fsError(p, err)
	}
	fi := fileInfo(p, info)
	fi.SHA256 = hex.EncodeToString(h.Sum(nil))
	b.touch()
	b.addEntry(record.Action{Kind: "file_put", Time: time.Now().UTC(), Path: p, File: &d, Size: n, Decision: decision}, fmt.Sprintf("put %s (%d bytes)", p, n))
	return fi, nil
}

func (m *manager) GetFile(ctx context.Context, id, p string, w io.Writer) (FileInfo, error) {
	p, err := cleanPath(p, false)
	if err != nil {
		return FileInfo{}, err
	}
	b, root, _, err := m.root(ctx, id, policy.ActionFileRead, p)
	if err != nil {
		return FileInfo{}, err
	}
	defer root.Close()
	if info, err := root.Lstat(p); err == nil && info.Kind == jobfs.Dir {
		return FileInfo{}, Errorf(CodeConflict, "%s: is a directory; list it with GET /v1/sandboxes/%s/ls/%s", p, id, p)
	}
	f, info, err := root.OpenFile(p)
	if err != nil {
		return FileInfo{}, fsError(p, err)
	}
	defer f.Close()
	if info.Size > MaxFileBytes {
		return FileInfo{}, Errorf(CodeTooLarge, "%s: %d bytes, over %d, the most one get returns; read it in parts with exec (split, head -c)", p, info.Size, int64(MaxFileBytes))
	}
	// The hash is of the bytes sent, which the server gives the client as
	// a trailer to check them against.
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(f, MaxFileBytes)); err != nil {
		return FileInfo{}, err
	}
	b.touch()
	fi := fileInfo(p, info)
	fi.SHA256 = hex.EncodeToString(h.Sum(nil))
	return fi, nil
}

func (m *manager) Stat(ctx context.Context, id, p string) (FileInfo, error) {
	p, err := cleanPath(p, true)
	if err != nil {
		return FileInfo{}, err
	}
	_, root, _, err := m.root(ctx, id, policy.ActionFileList, p)
	if err != nil {
		return FileInfo{}, err
	}
	defer root.Close()
	info, err := root.Lstat(p)
	if err != nil {
		return FileInfo{}, fsError(p, err)
	}
	return fileInfo(p, info), nil
}

// maxList bounds one listing.
const maxList = 10000

func (m *manager) ListFiles(ctx context.Context, id, dir string) ([]FileInfo, error) {
	dir, err := cleanPath(dir, true)
	if err != nil {
		return nil, err
	}
	_, root, _, err := m.root(ctx, id, policy.ActionFileList, dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	names, err := root.ReadDir(dir, maxList)
	if err != nil {
		return nil, fsError(dir, err)
	}
	out := []FileInfo{}
	for _, n := range names {
		p := path.Join(dir, n)
		info, err := root.Lstat(p)
		if err != nil {
			continue // gone meanwhile, or a FIFO or device: not listed
		}
		out = append(out, fileInfo(p, info))
	}
	return out, nil
}

func (m *manager) RemoveFile(ctx context.Context, id, p string, recursive bool) error {
	p, err := cleanPath(p, false)
	if err != nil {
		return err
	}
	b, root, decision, err := m.root(ctx, id, policy.ActionRemove, p)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.Remove(p, recursive); err != nil {
		return fsError(p, err)
	}
	b.touch()
	b.addEntry(record.Action{Kind: "file_remove", Time: time.Now().UTC(), Path: p, Decision: decision}, "remove "+p)
	return nil
}
