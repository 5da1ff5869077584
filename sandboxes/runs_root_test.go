package sandboxes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
)

const twoSteps = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: two-steps
steps:
  - name: make
    isolation: namespace
    run: |
      mkdir -p out && echo made > out/a.txt && echo made it
    outputs: [out/a.txt]
  - name: check
    isolation: namespace
    needs: [make]
    run: |
      cat out/a.txt; echo boom >&2; exit 3
`

// TestRunWorkflow is the real thing: a two-step workflow sent inline runs
// as apply runs it (each step jailed, outputs passed along), the failed
// step is data, and the record it names verifies.
func TestRunWorkflow(t *testing.T) {
	m, store := newManager(t, Options{})
	info, err := m.(Runner).Run(context.Background(), RunRequest{Inline: twoSteps})
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != string(record.StatusFailed) || info.Workflow != "two-steps" || len(info.Steps) != 2 {
		t.Fatalf("run = %+v", info)
	}
	mk, ck := info.Steps[0], info.Steps[1]
	if mk.Name != "make" || mk.Status != "succeeded" || mk.Stdout != "made it\n" || len(mk.Outputs) != 1 || mk.Outputs[0].Path != "out/a.txt" {
		t.Errorf("step make = %+v", mk)
	}
	if ck.Status != "failed" || ck.ExitCode != 3 || ck.Stdout != "made\n" || ck.Stderr != "boom\n" || ck.Isolation != "namespace" {
		t.Errorf("step check = %+v", ck)
	}
	id, err := record.ParseID(info.Record)
	if err != nil {
		t.Fatal(err)
	}
	if problems, err := store.Verify(id); err != nil || len(problems) != 0 {
		t.Errorf("verify %s: %v %v", id, problems, err)
	}
}

// TestRunWorkflowRequests: a workflow file is taken only from the
// template directory, beneath it, and every bad request is a 4xx with
// what to do.
func TestRunWorkflowRequests(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ok.yaml"), []byte(strings.Replace(twoSteps, "exit 3", "exit 0", 1)), 0o644)
	os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: bad\nsteps:\n  - name: x\n    rn: true\n"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(dir, "escape.yaml"))
	m, _ := newManager(t, Options{TemplateDir: dir})
	r := m.(Runner)
	ctx := context.Background()
	info, err := r.Run(ctx, RunRequest{Workflow: "ok.yaml"})
	if err != nil || info.Status != "succeeded" {
		t.Fatalf("run ok.yaml: %+v, %v", info, err)
	}
	for _, c := range []struct {
		req  RunRequest
		code Code
		want string
	}{
		{RunRequest{}, CodeBadRequest, "exactly one"},
		{RunRequest{Workflow: "ok.yaml", Inline: twoSteps}, CodeBadRequest, "exactly one"},
		{RunRequest{Workflow: "../ok.yaml"}, CodeBadRequest, "inside the server's template directory"},
		{RunRequest{Workflow: "/etc/passwd"}, CodeBadRequest, "relative path"},
		{RunRequest{Workflow: "escape.yaml"}, CodeNotFound, "escape.yaml"},
		{RunRequest{Workflow: "none.yaml"}, CodeNotFound, "none.yaml"},
		{RunRequest{Workflow: "bad.yaml"}, CodeBadRequest, "rn"},
		{RunRequest{Inline: twoSteps, Isolation: "chroot"}, CodeBadRequest, "namespace, vm or auto"},
		{RunRequest{Inline: strings.Repeat("#", MaxInlineWorkflow+1)}, CodeTooLarge, "bytes"},
	} {
		_, err := r.Run(ctx, c.req)
		var e *Error
		if !errors.As(err, &e) || e.Code != c.code || !strings.Contains(e.Message, c.want) {
			t.Errorf("Run(%+v) = %v, want %s mentioning %q", c.req, err, c.code, c.want)
		}
	}
}

// TestRunWorkflowPolicy: run_workflow is an action the policy judges by
// the workflow's name, hash and steps, before anything runs.
func TestRunWorkflowPolicy(t *testing.T) {
	m, _ := newManager(t, Options{})
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "runs.rego"), []byte(`package agentsandbox

deny_action contains msg if {
	input.action == "run_workflow"
	"check" in input.workflow.steps
	msg := sprintf("workflow %s: no step named check", [input.workflow.name])
}
`), 0o644)
	strict, err := policy.Load(context.Background(), policy.Options{Dirs: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	m.(PolicySetter).SetPolicy(strict)
	_, err = m.(Runner).Run(context.Background(), RunRequest{Inline: twoSteps})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeDenied || e.Decision == "" || !strings.Contains(e.Message, "no step named check") {
		t.Fatalf("run = %v, want policy_denied with a decision", err)
	}
}

// TestRunWorkflowServerStops: a server that stops cancels the runs under
// way and waits for them: Close returns only after Run has, the run did
// not succeed, and a run that got as far as its step left a record.
func TestRunWorkflowServerStops(t *testing.T) {
	m, store := newManager(t, Options{})
	slow := "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: slow\nsteps:\n  - name: s\n    isolation: namespace\n    run: sleep 60\n"
	type result struct {
		info RunInfo
		err  error
	}
	done := make(chan result, 1)
	go func() {
		info, err := m.(Runner).Run(context.Background(), RunRequest{Inline: slow})
		done <- result{info, err}
	}()
	time.Sleep(2 * time.Second) // the step is running, unless the host is very slow
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// What Close left written: a run it waited for has its record by now.
	// (Run itself returns a moment later, after its place is given back.)
	written, err := store.List()
	if err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the run did not return after Close")
	}
	switch {
	case r.err != nil:
		// Stopped before the run had a record to write (a slow host).
		t.Logf("the run stopped before its step: %v", r.err)
	case r.info.Status == string(record.StatusSucceeded) || r.info.Record == "":
		t.Fatalf("run = %+v, want a stopped run with a record", r.info)
	default:
		id, _ := record.ParseID(r.info.Record)
		if len(written) != 1 || written[0].ID != id {
			t.Fatalf("Close returned before the run under way had written its record %s (records then: %+v)", id, written)
		}
	}
	if _, err := m.(Runner).Run(context.Background(), RunRequest{Inline: slow}); CodeOf(err) != CodeStopped {
		t.Errorf("a run after Close: %v, want server_stopping", err)
	}
}
