package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

func dag(edges map[string][]string, order ...string) *workflow.Workflow {
	w := &workflow.Workflow{}
	for _, n := range order {
		w.Steps = append(w.Steps, workflow.Step{Name: n, Needs: edges[n]})
	}
	return w
}

func TestScheduleOrderAndParallelism(t *testing.T) {
	// a -> b, a -> c, (b, c) -> d; e independent.
	w := dag(map[string][]string{"b": {"a"}, "c": {"a"}, "d": {"b", "c"}}, "a", "b", "c", "d", "e")
	var mu sync.Mutex
	finished := map[string]bool{}
	var live, peak int32
	out, err := schedule(context.Background(), w, 2, func(ctx context.Context, s workflow.Step) (vmrunner.StepResult, error) {
		n := atomic.AddInt32(&live, 1)
		for {
			p := atomic.LoadInt32(&peak)
			if n <= p || atomic.CompareAndSwapInt32(&peak, p, n) {
				break
			}
		}
		mu.Lock()
		for _, need := range s.Needs {
			if !finished[need] {
				t.Errorf("step %s started before its need %s finished", s.Name, need)
			}
		}
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		mu.Lock()
		finished[s.Name] = true
		mu.Unlock()
		atomic.AddInt32(&live, -1)
		return vmrunner.StepResult{Status: vmrunner.StatusSucceeded}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if peak > 2 {
		t.Errorf("ran %d steps at once with jobs=2", peak)
	}
	if peak < 2 {
		t.Errorf("never ran two independent steps at once (peak %d)", peak)
	}
	for _, o := range out {
		if !o.Ran || o.Result.Status != vmrunner.StatusSucceeded {
			t.Errorf("%s: %+v", o.Step, o)
		}
	}
}

func TestScheduleSkipsDependentsOfFailure(t *testing.T) {
	w := dag(map[string][]string{"b": {"a"}, "c": {"b"}}, "a", "b", "c", "d")
	out, err := schedule(context.Background(), w, 1, func(ctx context.Context, s workflow.Step) (vmrunner.StepResult, error) {
		if s.Name == "a" {
			return vmrunner.StepResult{Status: vmrunner.StatusFailed}, nil
		}
		return vmrunner.StepResult{Status: vmrunner.StatusSucceeded}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"a": true, "b": false, "c": false, "d": true}
	for _, o := range out {
		if o.Ran != want[o.Step] {
			t.Errorf("%s: ran=%v, want %v (skipped: %q)", o.Step, o.Ran, want[o.Step], o.Skipped)
		}
	}
	if out[2].Skipped == "" || out[1].Skipped != `needs "a", which did not succeed` {
		t.Errorf("skip reasons: b=%q c=%q", out[1].Skipped, out[2].Skipped)
	}
}

func TestScheduleStopsOnInfrastructureError(t *testing.T) {
	boom := errors.New("boom")
	w := dag(nil, "a", "b", "c")
	var started int32
	out, err := schedule(context.Background(), w, 1, func(ctx context.Context, s workflow.Step) (vmrunner.StepResult, error) {
		atomic.AddInt32(&started, 1)
		return vmrunner.StepResult{}, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if started != 1 {
		t.Errorf("%d steps started after an infrastructure error, want 1", started)
	}
	if out[1].Ran || out[1].Skipped == "" {
		t.Errorf("b: %+v", out[1])
	}
}

func TestScheduleCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	w := dag(map[string][]string{"b": {"a"}}, "a", "b")
	out, err := schedule(ctx, w, 1, func(ctx context.Context, s workflow.Step) (vmrunner.StepResult, error) {
		cancel()
		<-ctx.Done()
		return vmrunner.StepResult{}, ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if out[1].Ran {
		t.Errorf("b ran after cancellation")
	}
}
