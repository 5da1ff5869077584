package sandboxes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/inputs"
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

// TestRunInlineInputs: an inline workflow is an API caller's, so its
// inputs are judged by the policy's api_inputs before anything runs (a 403
// naming the input and the key; a 400 for a file input on a server with
// no template directory), and a policy that widens api_inputs, set while
// the server runs, takes effect at the next run. A workflow file from the
// template directory is the operator's and keeps the operator's fetch.
func TestRunInlineInputs(t *testing.T) {
	tmpl := t.TempDir()
	body := []byte("template data\n")
	os.WriteFile(filepath.Join(tmpl, "data.txt"), body, 0o644)
	sum := sha256.Sum256(body)
	pin := hex.EncodeToString(sum[:])
	victim := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	defer victim.Close()
	inline := func(source string) string {
		return "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: in\ninputs:\n  d:\n    source: " + source +
			"\n    sha256: \"" + pin + "\"\nsteps:\n  - name: s\n    isolation: namespace\n    inputs: [d]\n    run: cat d\n"
	}
	os.WriteFile(filepath.Join(tmpl, "op.yaml"), []byte(inline(victim.URL+"/d")), 0o644)
	fetcher := &inputs.Fetcher{}
	m, store := newManager(t, Options{TemplateDir: tmpl, Inputs: fetcher})
	fetcher.Store = store // the manager's own store
	r := m.(Runner)
	ctx := context.Background()

	info, err := r.Run(ctx, RunRequest{Inline: inline("data.txt")})
	if err != nil || info.Status != "succeeded" || info.Steps[0].Stdout != string(body) {
		t.Fatalf("an inline workflow's file from the template directory: %+v, %v", info, err)
	}
	_, err = r.Run(ctx, RunRequest{Inline: inline(victim.URL + "/d")})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeDenied || !strings.Contains(e.Message, `input "d"`) || !strings.Contains(e.Message, "api_inputs.network_allow") {
		t.Fatalf("an inline workflow's input on loopback: %v; want policy_denied naming the input and the key", err)
	}
	// The operator's workflow file fetches the same URL.
	if info, err := r.Run(ctx, RunRequest{Workflow: "op.yaml"}); err != nil || info.Status != "succeeded" {
		t.Fatalf("the operator's workflow: %+v, %v", info, err)
	}
	// The operator opens the address in the policy's data.
	_, port, _ := net.SplitHostPort(victim.Listener.Addr().String())
	data := filepath.Join(t.TempDir(), "data.json")
	os.WriteFile(data, []byte(`{"agentsandbox": {"api_inputs": {"network_allow": ["127.0.0.1/32:`+port+`"]}}}`), 0o644)
	wide, err := policy.Load(ctx, policy.Options{DataFiles: []string{data}})
	if err != nil {
		t.Fatal(err)
	}
	m.(PolicySetter).SetPolicy(wide)
	if info, err := r.Run(ctx, RunRequest{Inline: inline(victim.URL + "/d")}); err != nil || info.Status != "succeeded" {
		t.Fatalf("after the policy opened the address: %+v, %v", info, err)
	}

	none, _ := newManager(t, Options{Inputs: fetcher})
	_, err = none.(Runner).Run(ctx, RunRequest{Inline: inline("data.txt")})
	if !errors.As(err, &e) || e.Code != CodeBadRequest || !strings.Contains(e.Message, "template directory") {
		t.Fatalf("a file input without a template directory: %v; want a 400", err)
	}
	bare, _ := newManager(t, Options{TemplateDir: tmpl})
	_, err = bare.(Runner).Run(ctx, RunRequest{Inline: inline("data.txt")})
	if !errors.As(err, &e) || e.Code != CodeUnsupport {
		t.Fatalf("a manager without an input fetcher: %v; want not_supported_yet", err)
	}
}
