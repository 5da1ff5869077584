// Package mcp serves a sandboxes.Manager as a Model Context Protocol
// server (docs/mcp.md), with the official Go SDK
// (github.com/modelcontextprotocol/go-sdk).
//
// Its tools are the Manager's operations for an agent: sandbox_create,
// exec and exec_output, read_file, write_file, list_files, kill,
// list_sandboxes, and snapshot, list_snapshots and restore. Their arguments and results are typed Go structs, from
// which the SDK derives the JSON schemas a client sees. A failure of the
// Manager is a tool error (isError) whose text starts with the
// sandboxes.Code ("not_found: ...") and whose _meta carries the code,
// message and policy decision; a command that exits non-zero is a normal
// result. Records are resources, agentsandbox://records/{id} and the list
// agentsandbox://records, when a record.Store is given.
//
// `agentsandbox mcp` serves it on stdio; `agentsandbox serve` serves it
// over streamable HTTP at /mcp (HTTPHandler), behind the REST server's
// authentication.
package mcp
