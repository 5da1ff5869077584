package server

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// runner adds a scripted Run to the manager: it answers what the
// request asked for, or refuses a workflow the real manager would not
// find.
type runner struct {
	*managertest.Manager
	got   []sandboxes.RunRequest
	trace trace.SpanContext // of the last request's context
}

func (r *runner) Run(ctx context.Context, req sandboxes.RunRequest) (sandboxes.RunInfo, error) {
	r.got = append(r.got, req)
	r.trace = trace.SpanContextFromContext(ctx)
	if req.Workflow == "missing.yaml" {
		return sandboxes.RunInfo{}, sandboxes.Errorf(sandboxes.CodeNotFound, "workflow %q: no such file", req.Workflow)
	}
	return sandboxes.RunInfo{Record: "rec", Workflow: "demo", Status: "failed",
		Steps: []sandboxes.RunStep{{Name: "a", Status: "failed", ExitCode: 3, Stderr: "boom", Outputs: []sandboxes.RunOutput{}}}}, nil
}

// TestRunsNeedARunner: a manager that runs no workflows
// (managertest.Manager offers no Run) says so with not_supported_yet, not
// a 404 or a 500.
func TestRunsNeedARunner(t *testing.T) {
	e := newEnv(t, nil)
	wantErr(t, e.req("POST", "/v1/runs", sandboxes.RunRequest{Workflow: "ci.yaml"}), http.StatusNotImplemented,
		sandboxes.CodeUnsupport, "does not run workflows")
}

// TestRuns: the request reaches the runner as sent (strict JSON), a
// failed step is a 200 answer with its status, and the runner's errors
// keep their codes.
func TestRuns(t *testing.T) {
	var r *runner
	e := newEnv(t, func(o *Options) {
		r = &runner{Manager: o.Manager.(*managertest.Manager)}
		o.Manager = r
	})
	info := want[sandboxes.RunInfo](t, e.req("POST", "/v1/runs", sandboxes.RunRequest{Inline: "name: x", Isolation: "namespace"}), http.StatusOK)
	if info.Status != "failed" || len(info.Steps) != 1 || info.Steps[0].ExitCode != 3 || info.Record != "rec" {
		t.Errorf("run = %+v", info)
	}
	if len(r.got) != 1 || r.got[0].Inline != "name: x" || r.got[0].Isolation != "namespace" {
		t.Errorf("the runner got %+v", r.got)
	}
	wantErr(t, e.req("POST", "/v1/runs", sandboxes.RunRequest{Workflow: "missing.yaml"}), http.StatusNotFound, sandboxes.CodeNotFound, "missing.yaml")
	wantErr(t, e.req("POST", "/v1/runs", `{"workflow": "a.yaml", "steps": ["x"]}`), http.StatusBadRequest, sandboxes.CodeBadRequest, "steps")
}

// TestNetworkNeedsAManager: a manager that cannot change a sandbox's
// network (managertest.Manager offers no NetworkManager) says so; a bad
// body is still a 400 first.
func TestNetworkNeedsAManager(t *testing.T) {
	e := newEnv(t, nil)
	info := e.create(sandboxes.Spec{})
	wantErr(t, e.req("GET", "/v1/sandboxes/"+info.ID+"/network", nil), http.StatusNotImplemented, sandboxes.CodeUnsupport, "network.allow")
	wantErr(t, e.req("POST", "/v1/sandboxes/"+info.ID+"/network", `{"grant": ["a:1"], "x": 1}`), http.StatusBadRequest, sandboxes.CodeBadRequest)
	wantErr(t, e.req("POST", "/v1/sandboxes/"+info.ID+"/network", sandboxes.NetworkUpdate{Grant: []string{"a.test:443"}}), http.StatusNotImplemented, sandboxes.CodeUnsupport)
}

// TestTraceparent: with tracing on (a W3C propagator installed), a
// request's traceparent header is the parent of what the manager does for
// it; without one nothing is read.
func TestTraceparent(t *testing.T) {
	var r *runner
	e := newEnv(t, func(o *Options) {
		r = &runner{Manager: o.Manager.(*managertest.Manager)}
		o.Manager = r
	})
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	want[sandboxes.RunInfo](t, e.req("POST", "/v1/runs", sandboxes.RunRequest{Workflow: "a.yaml"}, "traceparent", tp), http.StatusOK)
	if r.trace.IsValid() {
		t.Errorf("tracing off, but the request's context has a trace: %v", r.trace)
	}
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })
	want[sandboxes.RunInfo](t, e.req("POST", "/v1/runs", sandboxes.RunRequest{Workflow: "a.yaml"}, "traceparent", tp), http.StatusOK)
	if got := r.trace.TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" || !r.trace.IsRemote() {
		t.Errorf("trace of the request's context = %s (remote %v), want the traceparent's", got, r.trace.IsRemote())
	}
}
