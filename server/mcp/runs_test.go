package mcp_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server/mcp"
)

// runner adds a scripted Run to the manager.
type runner struct {
	*managertest.Manager
	got []sandboxes.RunRequest
}

func (r *runner) Run(_ context.Context, req sandboxes.RunRequest) (sandboxes.RunInfo, error) {
	r.got = append(r.got, req)
	if req.Workflow == "" && req.Inline == "" {
		return sandboxes.RunInfo{}, sandboxes.Errorf(sandboxes.CodeBadRequest, "give exactly one of workflow and inline")
	}
	return sandboxes.RunInfo{Record: "0rec", Workflow: "demo", Status: "failed", Steps: []sandboxes.RunStep{
		{Name: "build", Status: "succeeded", Stdout: "built\n", Outputs: []sandboxes.RunOutput{{Path: "out", NarHash: "sha256-x", Size: 120}}},
		{Name: "test", Status: "failed", ExitCode: 1, Stderr: "1 test failed\n", Outputs: []sandboxes.RunOutput{}},
	}}, nil
}

func connectRunner(t *testing.T) (*sdk.ClientSession, *runner) {
	t.Helper()
	r := &runner{Manager: managertest.New(t, sandboxes.Options{})}
	st, ct := sdk.NewInMemoryTransports()
	ss, err := mcp.New(r, "test", mcp.Options{}).Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "0"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
		r.Close(context.Background())
	})
	return cs, r
}

// TestMCPRunWorkflow: run_workflow is offered where the manager runs
// workflows, passes its arguments on, returns the run as structured
// content and a summary a model can read (a failed step is a result, not
// an error), and keeps the manager's error codes.
func TestMCPRunWorkflow(t *testing.T) {
	cs, r := connectRunner(t)
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(tools.Tools, func(tool *sdk.Tool) bool { return tool.Name == "run_workflow" }) {
		t.Fatal("run_workflow is not offered by a manager that runs workflows")
	}
	info, res := call[sandboxes.RunInfo](t, cs, "run_workflow", map[string]any{"workflow": "ci.yaml", "isolation": "namespace"})
	if info.Record != "0rec" || len(info.Steps) != 2 || info.Steps[1].ExitCode != 1 {
		t.Errorf("run = %+v", info)
	}
	if len(r.got) != 1 || r.got[0] != (sandboxes.RunRequest{Workflow: "ci.yaml", Isolation: "namespace"}) {
		t.Errorf("the manager got %+v", r.got)
	}
	summary := text(res)
	for _, want := range []string{"workflow demo failed; record 0rec", "step test: failed, exit 1", "1 test failed", "built"} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary %q lacks %q", summary, want)
		}
	}
	callErr(t, cs, "run_workflow", map[string]any{}, sandboxes.CodeBadRequest)
}

// network adds a scripted egress change to the runner.
func (r *runner) Network(_ context.Context, id string) (sandboxes.NetworkInfo, error) {
	return sandboxes.NetworkInfo{Allow: []string{"a.test:443"}, Deny: []string{}}, nil
}

func (r *runner) UpdateNetwork(_ context.Context, id string, u sandboxes.NetworkUpdate) (sandboxes.NetworkInfo, error) {
	if id != "sb1" {
		return sandboxes.NetworkInfo{}, sandboxes.Errorf(sandboxes.CodeNotFound, "no sandbox %q", id)
	}
	return sandboxes.NetworkInfo{Allow: append([]string{"a.test:443"}, u.Grant...), Deny: []string{}}, nil
}

// TestMCPUpdateNetwork: update_network passes grants on and says what is
// allowed now.
func TestMCPUpdateNetwork(t *testing.T) {
	cs, _ := connectRunner(t)
	info, res := call[sandboxes.NetworkInfo](t, cs, "update_network", map[string]any{"sandbox_id": "sb1", "grant": []string{"b.test:443"}})
	if strings.Join(info.Allow, ",") != "a.test:443,b.test:443" || !strings.Contains(text(res), "a.test:443, b.test:443") {
		t.Errorf("update_network = %+v, %q", info, text(res))
	}
	callErr(t, cs, "update_network", map[string]any{"sandbox_id": "nope", "grant": []string{"b.test:443"}}, sandboxes.CodeNotFound)
}
