package sandboxes

import (
	"context"
	"errors"
	"os"
	"path"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentsandbox/agentsandbox/fsx/jobfs"
	"github.com/agentsandbox/agentsandbox/policy"
)

// Watching a workspace directory: inotify on directories opened beneath
// the workspace's root (O_PATH, never through a symlink) and watched
// through /proc/self/fd, so the host never resolves a path the job
// controls. A VM's workspace is the host directory its 9p share serves
// (the hypervisor writes it with the host's own calls), so the host's
// inotify sees the guest's changes too.

// FileEvent is one change under a watched directory.
type FileEvent struct {
	Path string `json:"path"` // workspace-relative
	// Type is "create", "write", "remove", "rename" (moved away from
	// Path) or "chmod" (metadata).
	Type string `json:"type"`
}

// Bounds of watching, per sandbox: watches at once (each a WatchDir
// call) and directories watched over all of them.
const (
	MaxWatchers    = 16
	MaxWatchedDirs = 4096
)

// watchPoll is how often a watch looks whether its sandbox stopped.
const watchPoll = 250 * time.Millisecond

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// watcher is one WatchDir call's inotify instance.
type watcher struct {
	b         *box
	root      *jobfs.Root
	f         *os.File // the inotify descriptor
	fd        int
	recursive bool
	dirs      map[int32]string // watch descriptor → workspace path
	byPath    map[string]int32
}

func (m *manager) WatchDir(ctx context.Context, id, dir string, recursive bool, ready func(), emit func(FileEvent) error) error {
	dir, err := cleanPath(dir, true)
	if err != nil {
		return err
	}
	b, root, _, err := m.root(ctx, id, policy.ActionWatch, dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if info, err := root.Lstat(dir); err != nil {
		return fsError(dir, err)
	} else if info.Kind != jobfs.Dir {
		return Errorf(CodeBadRequest, "%s: is a %s; watch a directory", dir, info.Kind)
	}
	b.mu.Lock()
	if b.watchers >= MaxWatchers {
		b.mu.Unlock()
		return Errorf(CodeLimit, "sandbox %s has %d directory watches already, the most it may: stop one first", id, MaxWatchers)
	}
	b.watchers++
	b.mu.Unlock()
	w := &watcher{b: b, root: root, recursive: recursive, dirs: map[int32]string{}, byPath: map[string]int32{}}
	defer func() {
		b.mu.Lock()
		b.watchers--
		b.watchedDirs -= len(w.dirs)
		b.mu.Unlock()
	}()
	w.fd, err = unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return Errorf(CodeInternal, "watch %s: inotify: %v", dir, err)
	}
	w.f = os.NewFile(uintptr(w.fd), "inotify")
	defer w.f.Close()
	if err := w.add(dir); err != nil {
		return err
	}
	ready()
	buf := make([]byte, 64<<10)
	for {
		if err := ctx.Err(); err != nil {
			return nil
		}
		if b.ending() {
			return Errorf(CodeConflict, "sandbox %s stopped", id)
		}
		w.f.SetReadDeadline(time.Now().Add(watchPoll))
		n, err := w.f.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if err != nil {
			return Errorf(CodeInternal, "watch %s: read inotify: %v", dir, err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := ""
			if ev.Len > 0 {
				raw := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				name = strings.TrimRight(string(raw), "\x00")
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				return Errorf(CodeLimit, "watch %s: more changes than the watch could keep up with; watch again", dir)
			}
			if err := w.handle(dir, ev.Wd, ev.Mask, name, emit); err != nil {
				return err
			}
		}
		b.touch()
	}
}

// handle turns one inotify event into FileEvents.
func (w *watcher) handle(top string, wd int32, mask uint32, name string, emit func(FileEvent) error) error {
	base, ok := w.dirs[wd]
	if !ok {
		return nil // a watch already dropped
	}
	if mask&unix.IN_IGNORED != 0 {
		w.drop(wd)
		return nil
	}
	if mask&unix.IN_DELETE_SELF != 0 {
		if base == top {
			return Errorf(CodeNotFound, "%s: the watched directory was removed", top)
		}
		return nil // its parent reports the remove
	}
	if name == "" {
		return nil
	}
	p := path.Join(base, name)
	isDir := mask&unix.IN_ISDIR != 0
	var typ string
	switch {
	case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		// A new directory is watched before its create is reported, and
		// what was made in it before its watch was in place is reported
		// as made now.
		found := []string{p}
		if isDir && w.recursive {
			if err := w.addTree(p, &found); err != nil {
				return err
			}
		}
		for _, f := range found {
			if err := emit(FileEvent{Path: f, Type: "create"}); err != nil {
				return err
			}
		}
		return nil
	case mask&unix.IN_MODIFY != 0:
		typ = "write"
	case mask&unix.IN_DELETE != 0:
		typ = "remove"
	case mask&unix.IN_MOVED_FROM != 0:
		typ = "rename"
		if isDir {
			w.dropTree(p)
		}
	case mask&unix.IN_ATTRIB != 0:
		typ = "chmod"
	default:
		return nil
	}
	return emit(FileEvent{Path: p, Type: typ})
}

// add watches the directory rel, and with recursive what is beneath it.
func (w *watcher) add(rel string) error {
	if w.recursive {
		return w.addTree(rel, nil)
	}
	return w.addOne(rel)
}

func (w *watcher) addOne(rel string) error {
	w.b.mu.Lock()
	over := w.b.watchedDirs >= MaxWatchedDirs
	if !over {
		w.b.watchedDirs++
	}
	w.b.mu.Unlock()
	if over {
		return Errorf(CodeLimit, "watch %s: the sandbox watches %d directories already, the most it may: watch fewer, or not recursively", rel, MaxWatchedDirs)
	}
	counted := true
	defer func() {
		if counted {
			w.b.mu.Lock()
			w.b.watchedDirs--
			w.b.mu.Unlock()
		}
	}()
	d, err := w.root.OpenDir(rel)
	if err != nil {
		return fsError(rel, err)
	}
	wd, err := unix.InotifyAddWatch(w.fd, "/proc/self/fd/"+strconv.Itoa(int(d.Fd())), watchMask)
	d.Close()
	if err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return Errorf(CodeLimit, "watch %s: the host's inotify watches are used up (fs.inotify.max_user_watches)", rel)
		}
		return Errorf(CodeInternal, "watch %s: %v", rel, err)
	}
	// A directory moved within the tree keeps its watch descriptor:
	// only its path changes.
	if old, ok := w.dirs[int32(wd)]; ok {
		delete(w.byPath, old)
	} else {
		counted = false
	}
	w.dirs[int32(wd)] = rel
	w.byPath[rel] = int32(wd)
	return nil
}

// addTree watches rel and the directories beneath it (never through a
// symlink: a symlink is an entry, not a directory), adding the paths it
// finds beneath rel to found if not nil.
func (w *watcher) addTree(rel string, found *[]string) error {
	if err := w.addOne(rel); err != nil {
		return err
	}
	names, err := w.root.ReadDir(rel, maxList)
	if err != nil {
		return nil // gone meanwhile: its parent reports it
	}
	for _, n := range names {
		p := path.Join(rel, n)
		if found != nil {
			*found = append(*found, p)
		}
		if info, err := w.root.Lstat(p); err == nil && info.Kind == jobfs.Dir {
			if err := w.addTree(p, found); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *watcher) drop(wd int32) {
	if p, ok := w.dirs[wd]; ok {
		delete(w.byPath, p)
		delete(w.dirs, wd)
		w.b.mu.Lock()
		w.b.watchedDirs--
		w.b.mu.Unlock()
	}
}

// dropTree stops watching rel and beneath it (moved away: if it moved
// within the tree, its create adds it again under its new path).
func (w *watcher) dropTree(rel string) {
	for wd, p := range w.dirs {
		if p == rel || strings.HasPrefix(p, rel+"/") {
			unix.InotifyRmWatch(w.fd, uint32(wd))
			w.drop(wd)
		}
	}
}

// ending says whether the sandbox is stopping or stopped.
func (b *box) ending() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.killing || b.info.State == StateStopped
}
