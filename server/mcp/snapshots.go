package mcp

import (
	"context"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

func (t *tools) registerSnapshots(s *sdk.Server) {
	addTool(s, &sdk.Tool{Name: "snapshot", Title: "Snapshot a sandbox's workspace",
		Description: "Save the sandbox's workspace (its files, not its running processes) as a content-addressed snapshot, to roll back to with restore or to start a new sandbox from with sandbox_create's from_snapshot. The same files always give the same snapshot id.",
		Annotations: &sdk.ToolAnnotations{IdempotentHint: true, OpenWorldHint: ptr(false)}},
		t.snapshot)
	addTool(s, &sdk.Tool{Name: "list_snapshots", Title: "List a sandbox's snapshots",
		Description: "List the snapshots taken of a sandbox, oldest first.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)}},
		t.snapshots)
	addTool(s, &sdk.Tool{Name: "restore", Title: "Roll a sandbox back to a snapshot",
		Description: "Replace the sandbox's whole workspace with a snapshot's files (taken of this or another of your sandboxes). Files written since are lost. No command may be running in the sandbox.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)}},
		t.restore)
}

// SnapshotArgs are snapshot's arguments.
type SnapshotArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Label     string `json:"label,omitempty" jsonschema:"a note to recognise the snapshot by, such as \"tests pass\""`
}

// Snapshot is a snapshot of a workspace.
type Snapshot struct {
	ID      string `json:"id" jsonschema:"the snapshot's id, sha256:<hex>, for restore and from_snapshot"`
	Sandbox string `json:"sandbox" jsonschema:"the sandbox it was taken of"`
	Label   string `json:"label,omitempty"`
	Created string `json:"created"`
	Size    int64  `json:"size" jsonschema:"bytes of the stored tree"`
}

func snapshotOf(si sandboxes.SnapshotInfo) Snapshot {
	return Snapshot{ID: si.ID, Sandbox: si.Sandbox, Label: si.Label, Created: rfc3339(si.Created), Size: si.Size}
}

func (t *tools) snapshot(ctx context.Context, a SnapshotArgs) (Snapshot, string, error) {
	si, err := t.m.Snapshot(ctx, a.SandboxID, a.Label)
	if err != nil {
		return Snapshot{}, "", err
	}
	return snapshotOf(si), "", nil
}

// SnapshotsArgs are list_snapshots' arguments.
type SnapshotsArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
}

// SnapshotList is list_snapshots' result.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
}

func (t *tools) snapshots(ctx context.Context, a SnapshotsArgs) (SnapshotList, string, error) {
	list, err := t.m.Snapshots(ctx, a.SandboxID)
	if err != nil {
		return SnapshotList{}, "", err
	}
	r := SnapshotList{Snapshots: make([]Snapshot, 0, len(list))}
	for _, si := range list {
		r.Snapshots = append(r.Snapshots, snapshotOf(si))
	}
	return r, "", nil
}

// RestoreArgs are restore's arguments.
type RestoreArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox whose workspace to replace"`
	Snapshot  string `json:"snapshot" jsonschema:"the snapshot's id, from snapshot or list_snapshots"`
}

func (t *tools) restore(ctx context.Context, a RestoreArgs) (Sandbox, string, error) {
	info, err := t.m.Restore(ctx, a.SandboxID, a.Snapshot)
	if err != nil {
		return Sandbox{}, "", err
	}
	return sandboxOf(info), "", nil
}
