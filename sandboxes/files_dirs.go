package sandboxes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/agentsandbox/agentsandbox/fsx/jobfs"
	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
)

// Directories and renames in the workspace, beneath its root and never
// through a symlink, like the rest of the files API (files.go).

// idName is a uid or gid as the sandbox names it: "user" for the job's
// (job, the DefaultUID or DefaultGID), "root" for 0, the number otherwise.
// The names are the ones E2B's programs expect; the sandbox has no passwd
// entry the host would read.
func idName(id uint32, job int) string {
	switch {
	case int(id) == job:
		return "user"
	case id == 0:
		return "root"
	}
	return strconv.FormatUint(uint64(id), 10)
}

// MakeDir makes the directory p and its missing parents, owned by the
// job's user, with mode (0755 when 0). An existing p is CodeConflict
// wrapping fs.ErrExist (a directory) or CodeConflict (anything else).
func (m *manager) MakeDir(ctx context.Context, id, p string, mode uint32) (FileInfo, error) {
	p, err := cleanPath(p, false)
	if err != nil {
		return FileInfo{}, err
	}
	if mode == 0 {
		mode = 0o755
	}
	if mode&^0o777 != 0 {
		return FileInfo{}, Errorf(CodeBadRequest, "mode %o: give permission bits only, such as 0755", mode)
	}
	b, root, decision, err := m.root(ctx, id, policy.ActionMkdir, p)
	if err != nil {
		return FileInfo{}, err
	}
	defer root.Close()
	if info, err := root.Lstat(p); err == nil {
		if info.Kind == jobfs.Dir {
			return FileInfo{}, &Error{Code: CodeConflict, Message: fmt.Sprintf("%s: the directory exists already", p), Err: fs.ErrExist}
		}
		return FileInfo{}, Errorf(CodeConflict, "%s: exists already and is a %s, not a directory", p, info.Kind)
	}
	if dir := path.Dir(p); dir != "." {
		if err := root.MkdirAll(dir, 0o755, guest.DefaultUID, guest.DefaultGID); err != nil {
			return FileInfo{}, fsError(dir, err)
		}
	}
	if err := root.Mkdir(p, fs.FileMode(mode), guest.DefaultUID, guest.DefaultGID); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return FileInfo{}, &Error{Code: CodeConflict, Message: fmt.Sprintf("%s: exists already", p), Err: fs.ErrExist}
		}
		return FileInfo{}, fsError(p, err)
	}
	info, err := root.Lstat(p)
	if err != nil {
		return FileInfo{}, fsError(p, err)
	}
	b.touch()
	b.addEntry(record.Action{Kind: "file_mkdir", Time: time.Now().UTC(), Path: p, Decision: decision}, "mkdir "+p)
	return fileInfo(p, info), nil
}

// Move renames from to to within the workspace, making to's missing
// parents. Neither is followed if it is a symlink (the entry itself
// moves); no component on the way to either is a symlink. An existing to
// is never replaced: CodeConflict wrapping fs.ErrExist. A directory is
// not moved into itself.
func (m *manager) Move(ctx context.Context, id, from, to string) (FileInfo, error) {
	from, err := cleanPath(from, false)
	if err != nil {
		return FileInfo{}, err
	}
	to, err = cleanPath(to, false)
	if err != nil {
		return FileInfo{}, err
	}
	if to == from || strings.HasPrefix(to, from+"/") {
		return FileInfo{}, Errorf(CodeBadRequest, "move %s to %s: that is %s itself or inside it", from, to, from)
	}
	b, err := m.live(ctx, id)
	if err != nil {
		return FileInfo{}, err
	}
	decision, err := m.authorize(ctx, b, policy.Action{Action: policy.ActionMove, Path: from, Destination: to})
	if err != nil {
		return FileInfo{}, err
	}
	root, err := openRoot(b)
	if err != nil {
		return FileInfo{}, err
	}
	defer root.Close()
	if _, err := root.Lstat(from); err != nil {
		return FileInfo{}, fsError(from, err)
	}
	if dir := path.Dir(to); dir != "." {
		if err := root.MkdirAll(dir, 0o755, guest.DefaultUID, guest.DefaultGID); err != nil {
			return FileInfo{}, fsError(dir, err)
		}
	}
	if err := root.Rename(from, to); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return FileInfo{}, &Error{Code: CodeConflict, Message: fmt.Sprintf("move %s to %s: %s exists already; remove it first (a move never replaces)", from, to, to), Err: fs.ErrExist}
		}
		return FileInfo{}, fsError(from, err)
	}
	info, err := root.Lstat(to)
	if err != nil {
		return FileInfo{}, fsError(to, err)
	}
	b.touch()
	b.addEntry(record.Action{Kind: "file_move", Time: time.Now().UTC(), Path: from, Destination: to, Decision: decision}, fmt.Sprintf("move %s to %s", from, to))
	return fileInfo(to, info), nil
}
