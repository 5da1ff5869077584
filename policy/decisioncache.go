package policy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentsandbox/agentsandbox/fsx/atomicfile"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// A DecisionCache keeps admission decisions on disk, so that a process
// that admits a workflow it (or an earlier process) has admitted before
// neither compiles the policy nor evaluates it.
//
// That is sound because a decision is a function of what decides it:
// evaluation is deterministic (capabilities removes every builtin that
// reads the clock, the network, randomness or the environment), so the
// bundle digest, the input digest and the evaluator decide it. The first
// two name it (Decision.ID); the evaluator is this executable, which names
// the cache's directory by its identity (device, inode, size and
// modification time: a rebuilt or upgraded binary, with another OPA or
// other rules for reading a policy, starts an empty directory). An entry
// is read back only when it parses, names the same bundle and input and
// carries the ID they give; anything else is a miss and is written again.
// Entries are written whole (temp file and rename) without fsync: a crash
// can lose one, which costs one evaluation.
//
// The directory lives in the state directory (STATEDIR/policy-cache) and
// is as trusted as the records beside it: an entry is used only when it
// is a regular file owned by this process's user and writable by nobody
// else.
type DecisionCache struct {
	root string // STATEDIR/policy-cache
	dir  string // root/<this executable's identity>
}

// OpenDecisionCache returns the cache under root for this executable. It
// creates nothing until the first decision is stored.
func OpenDecisionCache(root string) (*DecisionCache, error) {
	id, err := executableIdentity()
	if err != nil {
		return nil, err
	}
	return &DecisionCache{root: root, dir: filepath.Join(root, id)}, nil
}

// executableIdentity names this executable by device, inode, size and
// modification time, hashed: what changes when it is rebuilt or replaced.
func executableIdentity() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("policy cache: find this executable: %w", err)
	}
	fi, err := os.Stat(exe)
	if err != nil {
		return "", fmt.Errorf("policy cache: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", errors.New("policy cache: no device and inode for this executable")
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "agentsandbox executable\n%d %d %d %d", st.Dev, st.Ino, fi.Size(), fi.ModTime().UnixNano()))
	return "exe-" + hex.EncodeToString(sum[:12]), nil
}

func (c *DecisionCache) path(id Digest) string {
	return filepath.Join(c.dir, hex.EncodeToString(id[:])+".json")
}

// get returns the stored decision for bundle and input, or nil.
func (c *DecisionCache) get(bundle, input Digest) *Decision {
	id := decisionID(bundle, input)
	f, err := os.Open(c.path(id))
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !trustedEntry(fi) || fi.Size() > maxCacheEntry {
		return nil
	}
	raw := make([]byte, fi.Size())
	if _, err := f.ReadAt(raw, 0); err != nil {
		return nil
	}
	var d Decision
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil
	}
	if d.ID != id || d.BundleDigest != bundle || d.InputDigest != input || d.Deny == nil || d.Warn == nil {
		return nil
	}
	return &d
}

// maxCacheEntry bounds what get reads: a decision is its messages and
// the policy's data about seccomp and egress, a few KiB.
const maxCacheEntry = 4 << 20

// trustedEntry: a regular file of this user that nobody else may write.
func trustedEntry(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fi.Mode().IsRegular() && fi.Mode().Perm()&0o022 == 0 && int(st.Uid) == os.Geteuid()
}

// put stores d. Failing to is not an error of the evaluation: the next
// process evaluates again.
func (c *DecisionCache) put(d *Decision) {
	stored := *d
	stored.EvalTime, stored.Cached = 0, false
	b, err := json.Marshal(&stored)
	if err != nil {
		return
	}
	// The state directory itself must exist: a command that only reads
	// (validate, plan) does not create one to keep a cache in.
	for _, d := range []string{c.root, c.dir} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return
		}
	}
	_ = atomicfile.WriteFile(c.path(d.ID), b, 0o600)
}

// GCDecisionCache removes from the cache under root what this executable
// will not read: the directories of other executables, and entries not
// used for maxAge (a hit refreshes an entry's modification time). It
// returns what it removed.
func GCDecisionCache(root string, maxAge time.Duration) (removed []string, err error) {
	c, err := OpenDecisionCache(root)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("policy cache: %w", err)
	}
	var errs []error
	for _, e := range ents {
		p := filepath.Join(root, e.Name())
		if p == c.dir {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, p)
	}
	own, err := os.ReadDir(c.dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	cutoff := time.Now().Add(-maxAge)
	for _, e := range own {
		p := filepath.Join(c.dir, e.Name())
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		if !strings.HasSuffix(e.Name(), ".json") || fi.ModTime().Before(cutoff) {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, p)
		}
	}
	return removed, errors.Join(errs...)
}

// CachedEngine is a policy bundle read and digested but compiled only when
// a decision is not in its DecisionCache. Its Eval gives what
// Engine.Eval gives, with Decision.Cached set on a decision read back. It
// is safe for concurrent use.
type CachedEngine struct {
	opts   Options
	cache  *DecisionCache // nil: every Eval evaluates
	b      *bundle
	digest Digest

	once   sync.Once
	engine *Engine
	err    error
}

// LoadCached reads the sources opts names, as Load does (mistakes in them
// are a *SourceError), without compiling them. cache may be nil.
func LoadCached(opts Options, cache *DecisionCache) (*CachedEngine, error) {
	b, err := readBundle(opts, false)
	if err != nil {
		return nil, err
	}
	return &CachedEngine{opts: opts, cache: cache, b: b, digest: b.digest()}, nil
}

// BundleDigest is the digest of the policy files and data.
func (c *CachedEngine) BundleDigest() Digest { return c.digest }

// Engine compiles the bundle, once (and through Load's cache of compiled
// engines). Compile mistakes are a *SourceError.
func (c *CachedEngine) Engine(ctx context.Context) (*Engine, error) {
	c.once.Do(func() {
		key := c.b.cacheKey()
		if e := engines.get(key); e != nil {
			c.engine = e
			return
		}
		c.engine, c.err = compile(ctx, c.opts, c.b)
		if c.err == nil {
			engines.put(key, c.engine)
		}
	})
	return c.engine, c.err
}

// Eval decides whether w may run on host: from the cache when the
// decision is there, else by compiling (once) and evaluating, and then
// storing the decision.
func (c *CachedEngine) Eval(ctx context.Context, w *workflow.Workflow, host Host) (*Decision, error) {
	start := time.Now()
	in, err := InputDocument(w, host)
	if err != nil {
		return nil, err
	}
	if c.cache != nil {
		if d := c.cache.get(c.digest, sha256.Sum256(in)); d != nil {
			now := time.Now()
			_ = os.Chtimes(c.cache.path(d.ID), now, now) // used: keep it from GCDecisionCache
			d.Cached, d.EvalTime, d.input = true, time.Since(start), in
			return d, nil
		}
	}
	e, err := c.Engine(ctx)
	if err != nil {
		return nil, err
	}
	d, err := e.evalInput(ctx, w, in, start)
	if err != nil {
		return nil, err
	}
	if c.cache != nil {
		c.cache.put(d)
	}
	return d, nil
}
