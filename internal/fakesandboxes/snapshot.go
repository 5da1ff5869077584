package fakesandboxes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// Snapshots of the fake are copies of the sandbox's directory under
// DIR/snapshots/<hex>, named by a sha256 over the tree's paths, modes and
// contents (not a NAR hash: the fake only has to behave like the API).

func (m *Manager) snapDir(hexd string) string { return filepath.Join(m.dir, "snapshots", hexd) }

func treeHash(dir string) (string, error) {
	h := sha256.New()
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(paths)
	for _, p := range paths {
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%o\x00", rel, fi.Mode())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			t, _ := os.Readlink(p)
			fmt.Fprintf(h, "%s\x00", t)
		case fi.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return "", err
			}
			io.Copy(h, f)
			f.Close()
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// copyTree copies src into dst (which exists), symlinks as symlinks.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return nil
		}
		to := filepath.Join(dst, rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(t, to)
		case fi.IsDir():
			return os.Mkdir(to, fi.Mode().Perm())
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, fi.Mode().Perm())
		}
	})
}

func (m *Manager) Snapshot(ctx context.Context, id, label string) (sandboxes.SnapshotInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, err := m.running(ctx, id)
	if err != nil {
		return sandboxes.SnapshotInfo{}, err
	}
	hexd, err := treeHash(sb.dir)
	if err != nil {
		return sandboxes.SnapshotInfo{}, sandboxes.Errorf(sandboxes.CodeInternal, "snapshot: %v", err)
	}
	dst := m.snapDir(hexd)
	if _, err := os.Stat(dst); err != nil {
		if err := os.MkdirAll(dst, 0o700); err != nil {
			return sandboxes.SnapshotInfo{}, sandboxes.Errorf(sandboxes.CodeInternal, "snapshot: %v", err)
		}
		if err := copyTree(sb.dir, dst); err != nil {
			return sandboxes.SnapshotInfo{}, sandboxes.Errorf(sandboxes.CodeInternal, "snapshot: %v", err)
		}
	}
	if m.snapOwners == nil {
		m.snapOwners = map[string]map[string]bool{}
	}
	if m.snapOwners[hexd] == nil {
		m.snapOwners[hexd] = map[string]bool{}
	}
	m.snapOwners[hexd][sb.owner] = true
	info := sandboxes.SnapshotInfo{ID: "sha256:" + hexd, Sandbox: id, Label: label, Created: m.now()}
	sb.snapshots = append(sb.snapshots, info)
	return info, nil
}

func (m *Manager) Snapshots(ctx context.Context, id string) ([]sandboxes.SnapshotInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	return append([]sandboxes.SnapshotInfo{}, sb.snapshots...), nil
}

func (m *Manager) Restore(ctx context.Context, id, snap string) (sandboxes.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, err := m.running(ctx, id)
	if err != nil {
		return sandboxes.Info{}, err
	}
	if err := m.restoreLocked(ctx, sb, snap); err != nil {
		return sandboxes.Info{}, err
	}
	return sb.copyInfo(), nil
}

func (m *Manager) restoreLocked(ctx context.Context, sb *sandbox, snap string) error {
	src, err := m.snapshotDir(ctx, snap)
	if err != nil {
		return err
	}
	for _, x := range sb.execs {
		x.mu.Lock()
		running := !x.done
		x.mu.Unlock()
		if running {
			return sandboxes.Errorf(sandboxes.CodeConflict, "a command is running in sandbox %s: wait for it or signal it before restoring", sb.info.ID)
		}
	}
	entries, err := os.ReadDir(sb.dir)
	if err != nil {
		return sandboxes.Errorf(sandboxes.CodeInternal, "restore: %v", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(sb.dir, e.Name())); err != nil {
			return sandboxes.Errorf(sandboxes.CodeInternal, "restore: %v", err)
		}
	}
	if err := copyTree(src, sb.dir); err != nil {
		return sandboxes.Errorf(sandboxes.CodeInternal, "restore: %v", err)
	}
	sb.info.LastActive = time.Now()
	return nil
}

// snapshotDir is the directory of snapshot snap, one a sandbox of the
// caller took unless it is an admin; m.mu is held.
func (m *Manager) snapshotDir(ctx context.Context, snap string) (string, error) {
	var hexd string
	if _, err := fmt.Sscanf(snap, "sha256:%64s", &hexd); err != nil || len(hexd) != 64 {
		return "", sandboxes.Errorf(sandboxes.CodeBadRequest, "snapshot %q: want the id a snapshot returned, sha256:<64 hex>", snap)
	}
	if _, err := hex.DecodeString(hexd); err != nil {
		return "", sandboxes.Errorf(sandboxes.CodeBadRequest, "snapshot %q: want the id a snapshot returned, sha256:<64 hex>", snap)
	}
	dir := m.snapDir(hexd)
	if who := caller(ctx); !who.Admin && (who.Name == "" || !m.snapOwners[hexd][who.Name]) {
		return "", sandboxes.Errorf(sandboxes.CodeNotFound, "no snapshot %s on this server", snap)
	}
	if _, err := os.Stat(dir); err != nil {
		return "", sandboxes.Errorf(sandboxes.CodeNotFound, "no snapshot %s on this server", snap)
	}
	return dir, nil
}
