package server

import (
	"io"
	"testing"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// TestSnapshots: a snapshot, a change, a restore (rollback), a fork from
// the snapshot, and the errors of each.
func TestSnapshots(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(sandboxes.Spec{})
	base := "/v1/sandboxes/" + sb.ID
	want[sandboxes.FileInfo](t, e.req("PUT", base+"/files/state.txt", "good\n"), 200)
	snap := want[sandboxes.SnapshotInfo](t, e.req("POST", base+"/snapshots", sandboxes.SnapshotRequest{Label: "before the agent's step"}), 201)
	if len(snap.ID) != len("sha256:")+64 || snap.Sandbox != sb.ID || snap.Label != "before the agent's step" {
		t.Fatalf("snapshot: %+v", snap)
	}
	// Without a body too.
	again := want[sandboxes.SnapshotInfo](t, e.req("POST", base+"/snapshots", nil), 201)
	if again.ID != snap.ID {
		t.Errorf("the same workspace gave another snapshot id: %s, %s", again.ID, snap.ID)
	}
	if l := want[SnapshotList](t, e.req("GET", base+"/snapshots", nil), 200); len(l.Snapshots) != 2 {
		t.Errorf("list: %+v", l)
	}
	want[sandboxes.FileInfo](t, e.req("PUT", base+"/files/state.txt", "broken\n"), 200)
	want[sandboxes.FileInfo](t, e.req("PUT", base+"/files/junk.txt", "x"), 200)
	want[sandboxes.Info](t, e.req("POST", base+"/restore", sandboxes.RestoreRequest{Snapshot: snap.ID}), 200)
	resp := e.req("GET", base+"/files/state.txt", nil)
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "good\n" {
		t.Errorf("after restore: %q", b)
	}
	wantErr(t, e.req("GET", base+"/files/junk.txt", nil), 404, sandboxes.CodeNotFound)

	fork := want[sandboxes.Info](t, e.req("POST", "/v1/sandboxes", sandboxes.Spec{FromSnapshot: snap.ID}), 201)
	resp = e.req("GET", "/v1/sandboxes/"+fork.ID+"/files/state.txt", nil)
	b, _ = io.ReadAll(resp.Body)
	if fork.ID == sb.ID || string(b) != "good\n" {
		t.Errorf("fork: %s %q", fork.ID, b)
	}

	wantErr(t, e.req("POST", base+"/restore", sandboxes.RestoreRequest{}), 400, sandboxes.CodeBadRequest, "snapshot")
	wantErr(t, e.req("POST", base+"/restore", sandboxes.RestoreRequest{Snapshot: "../../etc"}), 400, sandboxes.CodeBadRequest)
	wantErr(t, e.req("POST", base+"/restore", sandboxes.RestoreRequest{Snapshot: "sha256:" + "00000000000000000000000000000000000000000000000000000000000000ff"}), 404, sandboxes.CodeNotFound)
	wantErr(t, e.req("POST", "/v1/sandboxes", sandboxes.Spec{FromSnapshot: "sha256:nope"}), 400, sandboxes.CodeBadRequest)
	wantErr(t, e.req("POST", "/v1/sandboxes/nosuch/snapshots", nil), 404, sandboxes.CodeNotFound)
}
