// Package provenance turns an execution record into signed SLSA provenance:
// an in-toto Statement v1 whose predicate is SLSA provenance v1, in a DSSE
// envelope signed with an ECDSA P-256 or ed25519 key.
//
// Build makes the Statement from a record and the blob store beside it. Its
// subjects are every regular file of every output, read by walking the
// output's NAR blob (never by following a path on disk), and each output as
// a whole by its NAR hash. The predicate pins what the run was asked to do
// (externalParameters: the workflow and its steps' requested isolation,
// limits, network and environment names; never values), how this host did
// it (internalParameters), what it ran on (resolvedDependencies: closures,
// inputs, host root, kernel) and what else it left (byproducts: the record,
// logs, network audit logs, job specs). Sign wraps the Statement's canonical
// JSON in a DSSE envelope; Verify checks an envelope against a key, the
// record and the store, and names every mismatch.
//
// The format, with the meaning of every field, is docs/provenance.md; the
// build type it names is BuildType.
//
// This package is part of the pure core: like record, it must not import
// vmrunner, netns, golang.org/x/sys/unix or netlink. It does not import
// package workflow either: the caller parses the workflow file the record
// pins and passes what the attestation needs as a Workflow.
package provenance
