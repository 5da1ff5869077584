package sandboxes

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentsandbox/agentsandbox/fsx/jobfs"
	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Snapshots are NARs of the workspace in the blob store, named by a ref
// ("snapshot"/<hex>) so that a restore or a fork takes only a snapshot
// this server took, never any blob a client names; and by a ref of the
// identity whose sandbox took it ("snapshot.<name>"/<hex>), so that an
// identity restores and forks from its own snapshots only, after a
// restart too. An admin takes any snapshot of the server. Two identities
// whose workspaces were the same tree both own its snapshot: each has
// the content already.

const snapshotRef = "snapshot"

// ownerSnapshotRef is the kind of the refs of owner's snapshots.
func ownerSnapshotRef(owner string) string { return snapshotRef + "." + owner }

// maxSnapshotEntries bounds the files of one snapshot.
const maxSnapshotEntries = 1_000_000

func (m *manager) Snapshot(ctx context.Context, id, label string) (SnapshotInfo, error) {
	if len(label) > 200 {
		return SnapshotInfo{}, Errorf(CodeBadRequest, "snapshot label of %d characters: use at most 200", len(label))
	}
	b, root, decision, err := m.root(ctx, id, policy.ActionSnapshot, ".")
	if err != nil {
		return SnapshotInfo{}, err
	}
	defer root.Close()
	done, err := m.startTaking(b)
	if err != nil {
		return SnapshotInfo{}, err
	}
	defer done()
	// Until the snapshot is listed by its box, the collector waits
	// (snapcollect.go).
	m.snaps.mu.RLock()
	defer m.snaps.mu.RUnlock()
	left, err := m.snapshotQuota(b)
	if err != nil {
		return SnapshotInfo{}, err
	}
	store := b.sb.Store()
	budget := &jobfs.Budget{MaxBytes: b.sb.Step.Resources.Disk + 1, MaxEntries: maxSnapshotEntries}
	if budget.MaxBytes <= 1 {
		budget.MaxBytes = MaxFileBytes * 16
	}
	quota := Errorf(CodeTooLarge, "snapshot of sandbox %s: its NAR is over the %s the snapshot quotas leave it (serve --max-snapshot-bytes, --snapshot-store-bytes; every byte of every file counts, holes of sparse files too): nothing was stored; remove files it need not keep, or snapshot a sandbox that holds fewer", id, workflow.FormatSize(left))
	h, n, err := store.PutNARFunc(func(w io.Writer) error {
		return root.DumpNAR(&quotaWriter{w: w, left: left, err: quota}, ".", budget)
	})
	if err != nil {
		return SnapshotInfo{}, fsError(".", err)
	}
	// The id is the NAR hash spelled like every digest of the API,
	// sha256:<hex> (not Nix's SRI form).
	sid := h.Blob().String()
	hexd := strings.TrimPrefix(sid, "sha256:")
	if err := store.PutRef(snapshotRef, hexd, h.Blob()); err != nil {
		return SnapshotInfo{}, &Error{Code: CodeInternal, Message: "snapshot: " + err.Error(), Err: err}
	}
	if b.owner != "" {
		if err := store.PutRef(ownerSnapshotRef(b.owner), hexd, h.Blob()); err != nil {
			return SnapshotInfo{}, &Error{Code: CodeInternal, Message: "snapshot: " + err.Error(), Err: err}
		}
	}
	info := SnapshotInfo{ID: sid, Sandbox: id, Label: label, Created: time.Now().UTC(), Size: n}
	b.mu.Lock()
	b.snapshots = append(b.snapshots, info)
	b.mu.Unlock()
	b.touch()
	d := h.Blob()
	summary := fmt.Sprintf("snapshot %s (%d bytes)", sid, n)
	if label != "" {
		summary += fmt.Sprintf(" %q", label)
	}
	b.addEntry(record.Action{Kind: "snapshot", Time: info.Created, File: &d, Size: n, Decision: decision}, summary)
	return info, nil
}

func (m *manager) Snapshots(ctx context.Context, id string) ([]SnapshotInfo, error) {
	b, err := m.box(ctx, id)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]SnapshotInfo{}, b.snapshots...), nil
}

// snapshotDigest checks that snap names a snapshot this server took, of
// a sandbox of the caller of ctx unless that is an admin; another
// identity's snapshot is answered as one that does not exist.
func (m *manager) snapshotDigest(ctx context.Context, store *record.Store, snap string) (record.NarHash, error) {
	hexd, ok := strings.CutPrefix(snap, "sha256:")
	if !ok || len(hexd) != 64 || strings.Trim(hexd, "0123456789abcdef") != "" {
		return record.NarHash{}, Errorf(CodeBadRequest, "snapshot %q: want the id a snapshot returned, sha256:<64 hex>", snap)
	}
	kind := snapshotRef
	if who := caller(ctx); !who.Admin {
		kind = ownerSnapshotRef(who.Name)
	}
	d, found, err := store.Ref(kind, hexd)
	if err != nil {
		return record.NarHash{}, &Error{Code: CodeInternal, Message: err.Error(), Err: err}
	}
	if !found {
		return record.NarHash{}, Errorf(CodeNotFound, "no snapshot %s on this server (POST /v1/sandboxes/ID/snapshots takes one)", snap)
	}
	return record.NarHash(d), nil
}

func (m *manager) Restore(ctx context.Context, id, snap string) (Info, error) {
	b, err := m.live(ctx, id)
	if err != nil {
		return Info{}, err
	}
	if _, err := m.authorize(ctx, b, policy.Action{Action: policy.ActionRestore, Path: snap}); err != nil {
		return Info{}, err
	}
	if err := b.restore(ctx, m, snap); err != nil {
		return Info{}, err
	}
	return b.snapshot(), nil
}

// restore replaces the workspace with the snapshot's tree: unpacked and
// checked in a directory of the host's first, then the workspace emptied
// and the tree copied in beneath its root, never through a symlink. Both
// writes go through jobfs: neither a symlink the snapshot holds nor one a
// process of the sandbox plants meanwhile is ever followed.
func (b *box) restore(ctx context.Context, m *manager, snap string) error {
	defer m.holdTree(snap)() // not collected while it is read
	b.mu.Lock()
	for _, x := range b.execs {
		if x.running() {
			b.mu.Unlock()
			return Errorf(CodeConflict, "sandbox %s has a command running (exec %s): wait for it or signal it before restoring", b.id, x.id)
		}
	}
	sb := b.sb
	b.mu.Unlock()
	store := sb.Store()
	h, err := m.snapshotDigest(ctx, store, snap)
	if err != nil {
		return err
	}
	scratch, err := sb.ScratchDir()
	if err != nil {
		return &Error{Code: CodeInternal, Message: "restore: " + err.Error(), Err: err}
	}
	defer os.RemoveAll(scratch)
	tree := filepath.Join(scratch, "tree")
	if err := restoreScratch(store, h, scratch); err != nil {
		return &Error{Code: CodeInternal, Message: "restore: " + err.Error(), Err: err}
	}
	root, err := jobfs.Open(sb.Workspace)
	if err != nil {
		return fsError(".", err)
	}
	defer root.Close()
	names, err := root.ReadDir(".", maxSnapshotEntries)
	if err != nil {
		return fsError(".", err)
	}
	for _, n := range names {
		if err := root.Remove(n, true); err != nil {
			return fsError(n, err)
		}
	}
	uid, gid := guest.DefaultUID, guest.DefaultGID
	err = filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(tree, p)
		if rel == "." {
			return nil
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return root.Symlink(target, rel, uid, gid)
		case d.IsDir():
			return root.MkdirAll(rel, 0o755, uid, gid)
		default:
			fi, err := d.Info()
			if err != nil {
				return err
			}
			mode := fs.FileMode(0o644)
			if fi.Mode()&0o111 != 0 {
				mode = 0o755
			}
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer src.Close()
			dst, err := root.CreateFile(rel, mode, uid, gid)
			if err != nil {
				return err
			}
			if _, err := io.Copy(dst, src); err != nil {
				dst.Close()
				return err
			}
			return dst.Close()
		}
	})
	if err != nil {
		return fsError(".", err)
	}
	b.touch()
	d := h.Blob()
	b.addEntry(record.Action{Kind: "restore", Time: time.Now().UTC(), File: &d}, "restore "+d.String())
	return nil
}

// restoreScratch unpacks snapshot h at scratch/tree, beneath scratch and
// never through a symlink, refusing a NAR that is not a well-formed tree.
func restoreScratch(store *record.Store, h record.NarHash, scratch string) error {
	root, err := jobfs.OpenRestorer(scratch)
	if err != nil {
		return err
	}
	defer root.Close()
	return store.RestoreNAR(h, root, "tree")
}
