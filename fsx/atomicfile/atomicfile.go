// Package atomicfile writes files so that a reader sees either the old
// content or the whole new one, never half: a temporary file in the same
// directory, fsync, rename, fsync of the directory. Every package that
// writes state (records, results, state files, generated flakes, locks)
// goes through it. A writer of many files can skip the per-file fsyncs
// (NoSync) and make them durable with one SyncFS, or fold that syncfs into
// the last file's write (Options.SyncFS), as the record store does.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// TempPrefix starts the name of every temporary file; code that lists a
// directory WriteFile writes into skips names with it (a crash can leave
// one behind).
const TempPrefix = ".tmp-"

// Options tune Write.
type Options struct {
	// NoSync skips both fsyncs. Only for a writer whose readers share its
	// kernel and page cache and who need no durability across a crash
	// (a namespace jail's agent writing for the host), or whose output is
	// written again on every run (nixgen's generated files): the rename
	// keeps it atomic.
	NoSync bool
	// SyncFS replaces the fsync of the temporary file by one syncfs(2) of
	// the file system it is on, before the rename: the file's bytes and
	// everything else written to that file system so far (say, blobs a
	// record names) are durable before the new name appears. The
	// directory is still fsynced after the rename. Ignored with NoSync.
	SyncFS bool
	// BeforeRename, when set, runs after the temporary file is complete
	// and before the rename; tests use it to simulate a crash there.
	BeforeRename func()
}

// WriteFile writes data to path atomically and durably, with perm.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, data, perm, Options{})
}

// Write is WriteFile with options. Errors name path.
func Write(path string, data []byte, perm os.FileMode, o Options) error {
	if err := write(path, data, perm, o); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func write(path string, data []byte, perm os.FileMode, o Options) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, TempPrefix+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if err := f.Chmod(perm); err != nil {
		return fail(err)
	}
	switch {
	case o.NoSync:
	case o.SyncFS:
		if err := syncfs(f); err != nil {
			return fail(err)
		}
	default:
		if err := f.Sync(); err != nil {
			return fail(fmt.Errorf("fsync: %w", err))
		}
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if o.BeforeRename != nil {
		o.BeforeRename()
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	if o.NoSync {
		return nil
	}
	return SyncDir(dir)
}

// SyncDir fsyncs a directory, so a rename in it survives a crash. File
// systems that cannot sync a directory (9p among them) are tolerated.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// SyncFS flushes the whole file system that holds path with one syncfs(2):
// when it returns, every file written there (by this process or any other)
// is durable. One SyncFS after many writes costs one journal commit instead
// of one per file.
func SyncFS(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return syncfs(f)
}
