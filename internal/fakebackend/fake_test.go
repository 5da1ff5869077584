package fakebackend

import (
	"context"
	"errors"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/runnertest"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

func TestConformance(t *testing.T) {
	runnertest.Run(t, func(t *testing.T) vmrunner.Backend { return New() }, runnertest.Options{
		AsCurrentUser: true,
		Isolation:     workflow.IsolationNamespace,
	})
}

func TestFail(t *testing.T) {
	boom := errors.New("boom")
	b := &Backend{Fail: map[string]error{"x": boom}}
	opts := runnertest.Options{AsCurrentUser: true}
	_, err := vmrunner.RunStep(context.Background(), b, opts.Spec(t, "x", runnertest.Sh("true")))
	if !errors.Is(err, boom) {
		t.Fatalf("Run: %v, want boom", err)
	}
	if got := b.Runs(); len(got) != 1 || got[0].Step.Name != "x" {
		t.Fatalf("Runs = %+v", got)
	}
}

func TestHostWorkdir(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/workspace", "/ws"}, {"/workspace/a/b", "/ws/a/b"}, {"/workspaces", ""}, {"/tmp", ""},
	} {
		got, err := hostWorkdir(tc.in, "/ws")
		if (err != nil) != (tc.want == "") || got != tc.want {
			t.Errorf("hostWorkdir(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestSessionConformance(t *testing.T) {
	runnertest.RunSessions(t, func(t *testing.T) vmrunner.Backend { return New() }, runnertest.Options{
		AsCurrentUser: true,
		Isolation:     workflow.IsolationNamespace,
	})
}
