package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/pipeline"
)

func progressEvents() []pipeline.Event {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return []pipeline.Event{
		{Time: t0, Kind: pipeline.EventPhase, Line: "run 2 steps"},
		{Time: t0, Kind: pipeline.EventStarted, Step: "train"},
		{Time: t0, Kind: pipeline.EventLog, Step: "train", Line: "epoch 1"},
		{Time: t0, Kind: pipeline.EventFinished, Step: "train", Result: &vmrunner.StepResult{
			Status: vmrunner.StatusFailed, HasResult: true, Result: guest.Result{ExitCode: 3},
			Started: t0, Finished: t0.Add(1500 * time.Millisecond)}},
		{Time: t0, Kind: pipeline.EventSkipped, Step: "eval", Line: `needs "train", which did not succeed`},
	}
}

func TestPlainProgress(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, false, []string{"train", "eval"})
	for _, e := range progressEvents() {
		p.Event(e)
	}
	p.Close()
	want := `==> run 2 steps
[train] started
[train] epoch 1
[train] failed: exit status 3 after 1.5s
[eval] skipped: needs "train", which did not succeed
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestJSONProgress(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, true, nil)
	for _, e := range progressEvents() {
		p.Event(e)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines, want 5:\n%s", len(lines), b.String())
	}
	var e struct {
		Kind   string `json:"kind"`
		Step   string `json:"step"`
		Result struct {
			Status string `json:"status"`
			Result struct {
				ExitCode int `json:"exitCode"`
			} `json:"result"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(lines[3]), &e); err != nil {
		t.Fatal(err)
	}
	if e.Kind != "finished" || e.Step != "train" || e.Result.Status != "failed" || e.Result.Result.ExitCode != 3 {
		t.Errorf("finished event: %+v", e)
	}
}

func TestDescribeResult(t *testing.T) {
	t0 := time.Now()
	cases := []struct {
		r    vmrunner.StepResult
		want string
	}{
		{vmrunner.StepResult{Status: vmrunner.StatusSucceeded, Started: t0, Finished: t0.Add(time.Second)}, "succeeded in 1s"},
		{vmrunner.StepResult{Status: vmrunner.StatusTimeout, Started: t0, Finished: t0.Add(time.Second)}, "timed out after 1s"},
		{vmrunner.StepResult{Status: vmrunner.StatusOOM, Started: t0, Finished: t0}, "killed: out of memory after 0s"},
		{vmrunner.StepResult{Status: vmrunner.StatusFailed, HasResult: true, Result: guest.Result{Signal: "SIGKILL"}, Started: t0, Finished: t0}, "failed: killed by SIGKILL after 0s"},
		{vmrunner.StepResult{Status: vmrunner.StatusFailed, Detail: "guest panicked"}, "failed: guest panicked"},
	}
	for _, c := range cases {
		if got := describeResult(&c.r); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}
