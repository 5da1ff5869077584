package fakesandboxes

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// cleanPath checks a workspace-relative, slash-separated path and returns
// it cleaned ("." for the workspace itself).
func cleanPath(p string) (string, error) {
	switch {
	case strings.ContainsRune(p, 0):
		return "", sandboxes.Errorf(sandboxes.CodeBadRequest, "path %q contains a NUL byte", p)
	case path.IsAbs(p):
		return "", sandboxes.Errorf(sandboxes.CodeBadRequest, "path %q is absolute: give it relative to the workspace", p)
	}
	if err := sandboxes.CheckPathLength(p); err != nil {
		return "", err
	}
	if p == "" {
		return ".", nil
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") || slices.Contains(strings.Split(p, "/"), "..") {
		return "", sandboxes.Errorf(sandboxes.CodeBadRequest, "path %q leaves the workspace: \"..\" is not allowed", p)
	}
	return c, nil
}

// fileError maps an error of the workspace's os.Root to a code.
func fileError(op, p string, err error) error {
	var e *sandboxes.Error
	switch {
	case errors.As(err, &e):
		return err
	case errors.Is(err, syscall.ENAMETOOLONG):
		return sandboxes.Errorf(sandboxes.CodeBadRequest, "%s %q: a name on the path is too long", op, p)
	case errors.Is(err, syscall.ENOTEMPTY):
		return sandboxes.Errorf(sandboxes.CodeConflict, "%s %q: the directory is not empty; remove it recursively", op, p)
	case errors.Is(err, fs.ErrNotExist):
		return sandboxes.Errorf(sandboxes.CodeNotFound, "%s %q: no such file in the workspace", op, p)
	case errors.Is(err, fs.ErrExist):
		return sandboxes.Errorf(sandboxes.CodeConflict, "%s %q: it already exists", op, p)
	case strings.Contains(err.Error(), "escapes"):
		return sandboxes.Errorf(sandboxes.CodeBadRequest, "%s %q: the path (or a symlink on it) leads out of the workspace", op, p)
	case strings.Contains(err.Error(), "is a directory"):
		return sandboxes.Errorf(sandboxes.CodeConflict, "%s %q: it is a directory", op, p)
	case strings.Contains(err.Error(), "not a directory"):
		return sandboxes.Errorf(sandboxes.CodeConflict, "%s %q: a part of the path is not a directory", op, p)
	}
	return sandboxes.Errorf(sandboxes.CodeInternal, "%s %q: %w", op, p, err)
}

func fileInfo(p string, fi fs.FileInfo) sandboxes.FileInfo {
	typ := "other"
	switch {
	case fi.Mode().IsRegular():
		typ = "file"
	case fi.IsDir():
		typ = "dir"
	case fi.Mode()&fs.ModeSymlink != 0:
		typ = "symlink"
	}
	if p == "" {
		p = "."
	}
	return sandboxes.FileInfo{Path: p, Type: typ, Size: fi.Size(), Mode: fmt.Sprintf("%04o", fi.Mode().Perm()), ModTime: fi.ModTime().UTC()}
}

// workspace finds a running sandbox's root and marks the sandbox active.
func (m *Manager) workspace(ctx context.Context, id string) (*os.Root, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, err := m.running(ctx, id)
	if err != nil {
		return nil, err
	}
	return sb.root, nil
}

func (m *Manager) PutFile(ctx context.Context, id, p string, r io.Reader, mode uint32) (sandboxes.FileInfo, error) {
	c, err := cleanPath(p)
	if err != nil {
		return sandboxes.FileInfo{}, err
	}
	if c == "." {
		return sandboxes.FileInfo{}, sandboxes.Errorf(sandboxes.CodeBadRequest, "put: name a file in the workspace, such as src/main.go")
	}
	if mode == 0 {
		mode = 0o644
	}
	if mode > 0o777 {
		return sandboxes.FileInfo{}, sandboxes.Errorf(sandboxes.CodeBadRequest, "put %q: mode %04o: give permission bits only, such as 0644 or 0755", p, mode)
	}
	root, err := m.workspace(ctx, id)
	if err != nil {
		return sandboxes.FileInfo{}, err
	}
	if fi, err := root.Lstat(c); err == nil && fi.IsDir() {
		return sandboxes.FileInfo{}, sandboxes.Errorf(sandboxes.CodeConflict, "put %q: it is a directory; remove it first or choose another name", p)
	}
	if dir := path.Dir(c); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return sandboxes.FileInfo{}, fileError("put", p, err)
		}
	}
	var b [6]byte
	rand.Read(b[:])
	tmp := path.Join(path.Dir(c), ".put-"+hex.EncodeToString(b[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fs.FileMode(mode))
	if err != nil {
		return sandboxes.FileInfo{}, fileError("put", p, err)
	}
	defer root.Remove(tmp)
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, sandboxes.MaxFileBytes+1))
	if err == nil {
		err = f.Chmod(fs.FileMode(mode))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		var e *sandboxes.Error
		if errors.As(err, &e) {
			return sandboxes.FileInfo{}, err
		}
		return sandboxes.FileInfo{}, sandboxes.Errorf(sandboxes.CodeInternal, "put %q: %w", p, err)
	}
	if n > sandboxes.MaxFileBytes {
		return sandboxes.FileInfo{}, sandboxes.Errorf(sandboxes.CodeTooLarge, "put %q: larger than %d bytes, the most one put takes: split it", p, sandboxes.MaxFileBytes)
	}
	if err := root.Rename(tmp, c); err != nil {
		return sandboxes.FileInfo{}, fileError("put", p, err)
	}
	fi, err := root.Lstat(c)
	if err != nil {
		return sandboxes.FileInfo{}, fileError("put", p, err)
	}
	info := fileInfo(c, fi)
	info.SHA256 = hex.EncodeToString(h.Sum(nil))
	return info, nil
}

func (m *Manager) GetFile(ctx context.Context, id, p string, w io.Writer) (sandboxes.FileInfo, error) {
	c, err := cleanPath(p)
	if err != nil {
		return sandboxes.FileInfo{}, err
	}
	root, err := m.workspace(ctx, id)
	if err != nil {
		return sandboxes.FileInfo{}, err
	}
	f, err := root.Open(c)
	if err != nil {
		return sandboxes.FileInfo{}, fileError("get", p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return sandboxes.FileInfo{}, fileError("get", p, err)
	}
	if fi.IsDir() {
		return sandboxes.FileInfo{}, sandboxes.Errorf(sandboxes.CodeConflict, "get %q: it is a directory; list it instead", p)
	}
	if !fi.Mode().IsRegular() {
		return sandboxes.FileInfo{}, sandboxes.Errorf(sandboxes.CodeBadRequest, "get %q: not a regular file", p)
	}
	if fi.Size() > sandboxes.MaxFileBytes {
		return sandboxes.FileInfo{}, sandboxes.Errorf(sandboxes.CodeTooLarge, "get %q: %d bytes, more than the %d one get returns: compress or split it in the sandbox", p, fi.Size(), sandboxes.MaxFileBytes)
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(f, sandboxes.MaxFileBytes)); err != nil {
		return sandboxes.FileInfo{}, sandboxes.Errorf(sandboxes.CodeInternal, "get %q: %w", p, err)
	}
	info := fileInfo(c, fi)
	info.SHA256 = hex.EncodeToString(h.Sum(nil))
	return info, nil
}

func (m *Manager) Stat(ctx context.Context, id, p string) (sandboxes.FileInfo, error) {
	c, err := cleanPath(p)
	if err != nil {
		return sandboxes.FileInfo{}, err
	}
	root, err := m.workspace(ctx, id)
	if err != nil {
		return sandboxes.FileInfo{}, err
	}
	fi, err := root.Lstat(c)
	if err != nil {
		return sandboxes.FileInfo{}, fileError("stat", p, err)
	}
	return fileInfo(c, fi), nil
}

func (m *Manager) ListFiles(ctx context.Context, id, dir string) ([]sandboxes.FileInfo, error) {
	c, err := cleanPath(dir)
	if err != nil {
		return nil, err
	}
	root, err := m.workspace(ctx, id)
	if err != nil {
		return nil, err
	}
	f, err := root.Open(c)
	if err != nil {
		return nil, fileError("list", dir, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.IsDir() {
		return nil, sandboxes.Errorf(sandboxes.CodeConflict, "list %q: not a directory; stat it instead", dir)
	}
	entries, err := f.ReadDir(-1)
	if err != nil {
		return nil, fileError("list", dir, err)
	}
	out := []sandboxes.FileInfo{}
	for _, de := range entries {
		fi, err := de.Info()
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, fileInfo(path.Join(c, de.Name()), fi))
	}
	slices.SortFunc(out, func(a, b sandboxes.FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

func (m *Manager) RemoveFile(ctx context.Context, id, p string, recursive bool) error {
	c, err := cleanPath(p)
	if err != nil {
		return err
	}
	if c == "." {
		return sandboxes.Errorf(sandboxes.CodeBadRequest, "remove: the workspace itself cannot be removed; name a file or directory in it")
	}
	root, err := m.workspace(ctx, id)
	if err != nil {
		return err
	}
	if _, err := root.Lstat(c); err != nil {
		return fileError("remove", p, err)
	}
	if recursive {
		err = root.RemoveAll(c)
	} else {
		err = root.Remove(c)
	}
	if err != nil {
		return fileError("remove", p, err)
	}
	return nil
}
