package main

import (
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// TestSharedStoreTwoNodes: apply on node A (state directory A) pushes its
// record; node B, with only the bucket, verifies it, reruns it (the
// workflow and inputs come from the bucket) and diffs the two runs; A then
// sees B's rerun through the bucket.
func TestSharedStoreTwoNodes(t *testing.T) {
	testtier.Root(t)
	_, url := sharedBucket(t)
	stateA, stateB := t.TempDir(), t.TempDir()
	code, out, stderr := execute(t, "apply", "--isolation", "namespace", "--state-dir", stateA, "--store", url, "../../examples/pipeline.yaml")
	if code != ExitOK || !strings.Contains(stderr, "pushed record ") {
		t.Fatalf("apply on A: exit %d\n%s\n%s", code, out, stderr)
	}
	id := lastLine(out)

	code, out, stderr = execute(t, "records", "verify", "--state-dir", stateB, "--store", url, id[:8])
	if code != ExitOK || !strings.Contains(stderr, "pulled record "+id) {
		t.Fatalf("records verify on B: exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, stderr = execute(t, "rerun", "--state-dir", stateB, "--store", url, id[:8])
	if code != ExitOK || !strings.Contains(out, "3 outputs identical, 0 different") || !strings.Contains(stderr, "pushed record ") {
		t.Fatalf("rerun on B: exit %d\n%s\n%s", code, out, stderr)
	}
	rerun := lastLine(out)
	code, out, stderr = execute(t, "records", "diff", "--state-dir", stateB, "--store", url, id, rerun)
	// One machine plays both nodes: the host is the same, only
	// measurements differ.
	if code != ExitOK || !strings.Contains(out, "(rerun of "+id+")") || !strings.Contains(out, "identical (only measurements differ)") {
		t.Fatalf("records diff on B: exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, stderr = execute(t, "records", "diff", "--state-dir", stateA, "--store", url, id, rerun[:10])
	if code != ExitOK || !strings.Contains(stderr, "pulled record "+rerun) {
		t.Fatalf("records diff on A of B's rerun: exit %d\n%s\n%s", code, out, stderr)
	}
	if r := recordOf(t, stateA, rerun); r.Parent == nil || r.Parent.String() != id {
		t.Fatalf("B's rerun, read on A, has parent %v; want %s", r.Parent, id)
	}
}

// TestApplyKeepsRecordWhenPushFails: apply with an unreachable store runs,
// keeps its record, and fails with what to do (exit status 5).
func TestApplyKeepsRecordWhenPushFails(t *testing.T) {
	testtier.Root(t)
	srv, url := sharedBucket(t)
	srv.Kill()
	state := t.TempDir()
	code, out, stderr := execute(t, "apply", "--isolation", "namespace", "--state-dir", state, "--store", url, "../../examples/hello.yaml")
	if code != ExitInfra || !strings.Contains(stderr, "cannot reach "+srv.Endpoint) || !strings.Contains(stderr, "agentsandbox records push ") {
		t.Fatalf("apply with a dead store: exit %d\n%s\n%s", code, out, stderr)
	}
	id := lastLine(out)
	if code, _, stderr := execute(t, "records", "verify", "--state-dir", state, id); code != ExitOK {
		t.Fatalf("the record of an apply whose push failed: exit %d\n%s", code, stderr)
	}
	srv.Restart()
	if code, _, stderr := execute(t, "records", "push", "--state-dir", state, "--store", url, id); code != ExitOK || !strings.Contains(stderr, "pushed record "+id) {
		t.Fatalf("push after the store is back: exit %d\n%s", code, stderr)
	}
}
