package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// stepFunc runs one step to completion. It returns an error only for an
// infrastructure failure, which stops the whole run.
type stepFunc func(ctx context.Context, step workflow.Step) (vmrunner.StepResult, error)

// Outcome is what became of one step in a scheduled run.
type Outcome struct {
	Step    string
	Ran     bool                // false when skipped because a step it needs did not succeed, or the run stopped
	Skipped string              // why it did not run
	Result  vmrunner.StepResult // valid when Ran
}

// schedule runs the workflow's steps in DAG order, at most jobs at a time
// (jobs < 1 means 1). A step runs once every step it needs has succeeded; a
// step whose need failed is skipped, while independent branches go on. The
// first infrastructure error (or ctx's cancellation) stops new steps from
// starting, waits for the running ones, and is returned.
//
// Outcomes come back in the workflow's step order.
func schedule(ctx context.Context, w *workflow.Workflow, jobs int, run stepFunc) ([]Outcome, error) {
	if jobs < 1 {
		jobs = 1
	}
	index := make(map[string]int, len(w.Steps))
	for i, s := range w.Steps {
		index[s.Name] = i
	}
	waiting := make([]int, len(w.Steps)) // needs not yet finished
	dependents := make([][]int, len(w.Steps))
	for i, s := range w.Steps {
		for _, n := range s.Needs {
			j, ok := index[n]
			if !ok {
				return nil, fmt.Errorf("schedule: step %q needs unknown step %q", s.Name, n)
			}
			waiting[i]++
			dependents[j] = append(dependents[j], i)
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	outcomes := make([]Outcome, len(w.Steps))
	for i, s := range w.Steps {
		outcomes[i].Step = s.Name
	}
	var (
		mu       sync.Mutex
		ready    []int
		failed   = make([]bool, len(w.Steps)) // did not succeed (failed, skipped, not run)
		finished = make(chan int)
		running  int
		firstErr error
	)
	for i := range w.Steps {
		if waiting[i] == 0 {
			ready = append(ready, i)
		}
	}

	// settle marks step i done and releases or skips its dependents.
	var settle func(i int)
	settle = func(i int) {
		for _, d := range dependents[i] {
			if failed[i] {
				if !failed[d] && !outcomes[d].Ran && outcomes[d].Skipped == "" {
					failed[d] = true
					outcomes[d].Skipped = fmt.Sprintf("needs %q, which did not succeed", w.Steps[i].Name)
				}
			}
			waiting[d]--
			if waiting[d] == 0 {
				if failed[d] {
					settle(d)
				} else {
					ready = append(ready, d)
				}
			}
		}
	}

	done := 0
	for done < len(w.Steps) {
		mu.Lock()
		for firstErr == nil && ctx.Err() == nil && running < jobs && len(ready) > 0 {
			sort.Ints(ready) // deterministic start order: file order
			i := ready[0]
			ready = ready[1:]
			running++
			go func(i int) {
				res, err := run(ctx, w.Steps[i])
				mu.Lock()
				outcomes[i].Ran = true
				outcomes[i].Result = res
				if err != nil {
					failed[i] = true
					if firstErr == nil {
						firstErr = fmt.Errorf("step %q: %w", w.Steps[i].Name, err)
						cancel()
					}
				} else if res.Status != vmrunner.StatusSucceeded {
					failed[i] = true
				}
				mu.Unlock()
				finished <- i
			}(i)
		}
		if running == 0 {
			// Nothing runs and nothing can start: the rest is skipped or
			// the run was stopped.
			for i := range w.Steps {
				if !outcomes[i].Ran && outcomes[i].Skipped == "" {
					outcomes[i].Skipped = "the run stopped before it started"
				}
			}
			err := firstErr
			mu.Unlock()
			if err == nil && ctx.Err() != nil {
				err = ctx.Err()
			}
			return outcomes, err
		}
		mu.Unlock()

		i := <-finished
		mu.Lock()
		running--
		done++
		before := countSkipped(outcomes)
		settle(i)
		done += countSkipped(outcomes) - before
		mu.Unlock()
	}
	err := firstErr
	if err == nil && ctx.Err() != nil && !errors.Is(ctx.Err(), context.Canceled) {
		err = ctx.Err()
	}
	return outcomes, err
}

func countSkipped(o []Outcome) int {
	n := 0
	for _, x := range o {
		if !x.Ran && x.Skipped != "" {
			n++
		}
	}
	return n
}
