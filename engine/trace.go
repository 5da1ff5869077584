package engine

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Tracing. The engine makes its spans with the OpenTelemetry API and the
// global tracer provider, which is the API's no-op unless the caller
// installed one (package telemetry): then each phase of a run is a child
// of the span in ctx (the CLI's apply span), and each step's job gets
// TRACEPARENT for its own span. Names and attributes are in
// docs/observability.md; the cicd.* and process.* ones are OpenTelemetry's
// semantic conventions.

// TracerName is the instrumentation scope of the engine's spans.
const TracerName = "github.com/agentsandbox/agentsandbox/engine"

// Attribute keys.
const (
	attrRunID       = attribute.Key("cicd.pipeline.run.id")
	attrTaskName    = attribute.Key("cicd.pipeline.task.name")
	attrTaskResult  = attribute.Key("cicd.pipeline.task.run.result")
	attrExitCode    = attribute.Key("process.exit.code")
	attrDecisionID  = attribute.Key("agentsandbox.decision.id")
	attrAllowed     = attribute.Key("agentsandbox.policy.allowed")
	attrIsolation   = attribute.Key("agentsandbox.isolation")
	attrAccel       = attribute.Key("agentsandbox.accel")
	attrHypervisor  = attribute.Key("agentsandbox.hypervisor")
	attrStatus      = attribute.Key("agentsandbox.step.status")
	attrSignal      = attribute.Key("agentsandbox.signal")
	attrSteps       = attribute.Key("agentsandbox.steps")
	attrInputName   = attribute.Key("agentsandbox.input.name")
	attrInputDigest = attribute.Key("agentsandbox.input.digest")
	attrRecordID    = attribute.Key("agentsandbox.record.id")
)

func tracer() trace.Tracer { return otel.Tracer(TracerName) }

// endSpan ends span, with status error and err's message when err is set.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// traceID is the trace of ctx's span as 32 hex digits, "" without one
// or when it is not sampled (nothing of it is exported).
func traceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return ""
	}
	return sc.TraceID().String()
}

// tracedAdmitted is admitted in an "admit" span that names the decision.
func tracedAdmitted(ctx context.Context, w *workflow.Workflow, o Options, emit func(Event)) (*workflow.Workflow, *policy.Decision, error) {
	ctx, span := tracer().Start(ctx, "admit")
	plan, d, err := admitted(ctx, w, o, emit)
	if d != nil {
		span.SetAttributes(attrDecisionID.String(d.ID.String()), attrAllowed.Bool(d.Allowed()))
	}
	endSpan(span, err)
	return plan, d, err
}

// nameRun puts the run's id on the caller's span, once it is known.
func nameRun(ctx context.Context, runID string) {
	trace.SpanFromContext(ctx).SetAttributes(attrRunID.String(runID))
}

// tracedRealise is realise in a "realise" span.
func tracedRealise(ctx context.Context, realise RealiseFunc, steps []workflow.Step) (map[string]Realised, error) {
	ctx, span := tracer().Start(ctx, "realise", trace.WithAttributes(attrSteps.Int(len(steps))))
	got, err := realise(ctx, steps)
	endSpan(span, err)
	return got, err
}

// tracedFetch is fetch in a "fetch NAME" span for input in.
func tracedFetch(ctx context.Context, fetch FetchFunc, in workflow.Input, dir string) (record.Input, string, error) {
	ctx, span := tracer().Start(ctx, "fetch "+in.Name, trace.WithAttributes(attrInputName.String(in.Name)))
	ri, path, err := fetch(ctx, in, dir)
	if err == nil {
		span.SetAttributes(attrInputDigest.String(ri.Digest.String()))
	}
	endSpan(span, err)
	return ri, path, err
}

// tracedStep is runStep in a "step NAME" span: the job's TRACEPARENT
// names it (addTraceEnv), and it ends with how the step ended.
func (r *run) tracedStep(ctx context.Context, step workflow.Step) (vmrunner.StepResult, error) {
	ctx, span := tracer().Start(ctx, "step "+step.Name, trace.WithAttributes(
		attrTaskName.String(step.Name), attrIsolation.String(string(step.Isolation))))
	res, err := r.runStep(ctx, step)
	if span.IsRecording() {
		if res.Status != "" {
			span.SetAttributes(attrStatus.String(string(res.Status)), attrTaskResult.String(taskResult(res.Status)))
		}
		if res.Isolation != "" {
			span.SetAttributes(attrIsolation.String(string(res.Isolation)))
		}
		if res.Accel != "" {
			span.SetAttributes(attrAccel.String(res.Accel), attrHypervisor.String(string(res.Hypervisor)))
		}
		if res.HasResult {
			span.SetAttributes(attrExitCode.Int(res.Result.ExitCode))
			if res.Result.Signal != "" {
				span.SetAttributes(attrSignal.String(res.Result.Signal))
			}
		}
		if err == nil && res.Status != vmrunner.StatusSucceeded {
			span.SetStatus(codes.Error, stepFailure(res))
		}
	}
	if err != nil {
		span.SetAttributes(attrTaskResult.String("error"))
	}
	endSpan(span, err)
	return res, err
}

// taskResult is cicd.pipeline.task.run.result for a step's status.
func taskResult(s vmrunner.Status) string {
	switch s {
	case vmrunner.StatusSucceeded:
		return "success"
	case vmrunner.StatusTimeout:
		return "timeout"
	}
	return "failure"
}

// stepFailure is the span status message of a step that ran and failed.
func stepFailure(res vmrunner.StepResult) string {
	msg := string(res.Status)
	if res.HasResult {
		msg += fmt.Sprintf(" (exit %d)", res.Result.ExitCode)
	}
	if res.Detail != "" {
		msg += ": " + res.Detail
	}
	return msg
}

// putRecord is store.Put in a "record" span that names the record.
func putRecord(ctx context.Context, store *record.Store, rec *record.Record) (record.ID, error) {
	_, span := tracer().Start(ctx, "record")
	id, err := store.Put(rec)
	if err == nil {
		span.SetAttributes(attrRecordID.String(id.String()))
	}
	endSpan(span, err)
	return id, err
}

// addTraceEnv gives the job TRACEPARENT (and TRACESTATE, if any) for
// the span in ctx, so that the job's own spans join the trace. Nothing
// when ctx has no span (tracing off). A variable the step's env sets
// itself is kept. The list stays sorted (guest.Job.Env).
func addTraceEnv(ctx context.Context, job *guest.Job) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	have := map[string]bool{}
	for _, kv := range job.Env {
		k, _, _ := strings.Cut(kv, "=")
		have[k] = true
	}
	for _, v := range []struct{ name, header string }{{"TRACEPARENT", "traceparent"}, {"TRACESTATE", "tracestate"}} {
		if val := carrier[v.header]; val != "" && !have[v.name] {
			job.Env = append(job.Env, v.name+"="+val)
		}
	}
	sort.Strings(job.Env)
}
