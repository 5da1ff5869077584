// Package record holds execution records and the content-addressed blob store
// next to them.
//
// A Record is the proof of one apply: what ran (workflow bytes and canonical
// hash, policy decision, closures or host fingerprint, input digests, job
// specs), how it ended (per-step status, exit code or signal, resource use),
// and what it produced (log blobs, outputs as NARs). Encode turns a Record
// into canonical JSON; its ID is the sha256 of those bytes, printed in Nix
// base32. A Store keeps records under records/ and blobs under blobs/,
// writes everything atomically (temp file, fsync, rename, fsync directory)
// and re-hashes on every read, so an edited byte is reported as a
// "hash mismatch" instead of being believed.
//
// Restores (RestoreNAR, Export) write through a RestoreDir, which must
// resolve every path beneath its directory without following a symlink;
// fsx/jobfs.Restorer is the one that does, with openat2. A NAR must be
// a well-formed tree, and a record whose outputs nest or leave their
// directory is refused (OutputLayout).
//
// The format is documented in docs/records.md and versioned by Version.
//
// This package is part of the pure core: it must not import vmrunner, netns,
// golang.org/x/sys/unix or netlink. The runner maps its own results onto the
// Step type here.
package record
