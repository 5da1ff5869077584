// Package workflow reads AgentSandbox workflow files (format v1): it parses
// the YAML, reports every problem at once as FILE:LINE:COL errors, applies
// defaults, orders the steps into a DAG, and encodes a defaulted workflow as
// canonical JSON whose sha256 is the workflow's identity (see Hash).
//
// The package is pure: it reads bytes it is given and touches neither the
// network nor the host. Permissions (which hosts a step may reach, whether an
// unpinned input is acceptable) are decided by package policy; this package
// only checks that a workflow is well formed.
//
// docs/workflow.md is the reference of the format; Schema returns the same
// format as a JSON Schema for editors.
package workflow
