package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/netns/egress/gateway"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/vmrunner/hoststate"
	"github.com/agentsandbox/agentsandbox/vmrunner/sandbox"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Sandbox is a long-lived sandbox (agentsandbox serve): a workflow's one
// step, set up exactly as Run sets up a step (isolation resolved, the
// policy's admission, Nix realisation, inputs, workspace quota, egress),
// whose agent then serves commands until Close.
type Sandbox struct {
	ID   string
	Step workflow.Step // isolation resolved
	// Decision is the policy's admission of the sandbox.
	Decision *policy.Decision
	// Workspace is the host directory mounted at /workspace: the files
	// API reads and writes it beneath its root (fsx/jobfs).
	Workspace string
	// Session is the backend's open sandbox, serving the session job.
	Session vmrunner.Sandbox

	run *run
	// plan is the admitted workflow, its step's network.allow kept as it
	// is now (ChangeEgress): what a change of egress is admitted against.
	plan    *workflow.Workflow
	rec     *record.Record
	sr      *record.Step
	gw      *gateway.Gateway
	started time.Time

	closeOnce sync.Once
	closeErr  error
	closeID   record.ID
}

// OpenSandbox opens a sandbox for the one step of w under id (which names
// its directories, netns and cgroup like a run id). The step's backend
// opens it with a session job (vmrunner.Backend.Open).
func OpenSandbox(ctx context.Context, w *workflow.Workflow, id string, o Options) (_ *Sandbox, err error) {
	if len(w.Steps) != 1 {
		return nil, fmt.Errorf("a sandbox is one step; the workflow has %d", len(w.Steps))
	}
	emit := o.Events
	if emit == nil {
		emit = func(Event) {}
	}
	started := time.Now().UTC()
	plan, decision, err := admitted(ctx, w, o, emit)
	if err != nil {
		return nil, err
	}
	step := plan.Steps[0]
	backend := o.Backends[step.Isolation]
	if backend == nil {
		if step.Isolation == workflow.IsolationVM {
			return nil, fmt.Errorf("vm sandboxes need qemu on the host (apt-get install qemu-system-x86) and a runner realised by Nix from a template that pins nixpkgs; or use isolation namespace")
		}
		return nil, fmt.Errorf("%s sandboxes cannot be held open on this host: use isolation namespace for a long-lived sandbox", step.Isolation)
	}
	runDir := filepath.Join(o.RunRoot, id)
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return nil, fmt.Errorf("create sandbox directory: %w", err)
	}
	workspaces := sandbox.NewWorkspaces(o.HostStateDir, id, runDir)
	if err := hoststate.WriteOwner(runDir, id); err != nil {
		return nil, errors.Join(fmt.Errorf("create sandbox directory: %w", err), workspaces.RemoveRunDir())
	}
	r := &run{o: o, w: w, emit: emit, runID: id, runDir: runDir, steps: plan.Steps, decision: decision, workspaces: workspaces,
		realised: map[string]Realised{}, inputDirs: map[string]string{}}
	rec := &record.Record{
		Version: record.Version, ToolVersion: o.ToolVersion, Host: o.Host.Record(),
		Started: started, Policy: policyRecord(decision), Owner: o.Owner,
	}
	sb := &Sandbox{ID: id, Step: step, Decision: decision, run: r, plan: plan, rec: rec, started: started}
	defer func() {
		if err != nil {
			err = errors.Join(err, sb.release())
		}
	}()
	if err := r.pinWorkflow(rec); err != nil {
		return nil, err
	}
	if err := r.logDecisions(rec, plan); err != nil { // the admission, as an apply's (decisionlog.go)
		return nil, err
	}
	if err := r.prepare(ctx, rec); err != nil {
		return nil, err
	}
	st, err := r.stage(ctx, step, true)
	if err != nil {
		return nil, err
	}
	sb.Workspace, sb.sr, sb.gw = st.dirs.Workspace, st.sr, st.gw
	sess, err := backend.Open(ctx, st.spec)
	if err != nil {
		return nil, err
	}
	sb.Session = sess
	return sb, nil
}

// Env is the environment every command of the sandbox starts from (the
// step's job environment), KEY=VALUE.
func (sb *Sandbox) Env() []string { return jobFor(sb.Step, sb.run.realised[sb.Step.Name].EnvPath).Env }

// Gateway is the sandbox's egress, nil without network.allow.
func (sb *Sandbox) Gateway() *gateway.Gateway { return sb.gw }

// ErrNoEgress is SetEgress on a sandbox opened without network.allow: it
// has no network room (firewall, resolver, proxy) whose rules could change.
var ErrNoEgress = errors.New("the sandbox was opened without network.allow, so it has no egress to change; open it with network.allow naming at least one entry (it can be revoked later)")

// EgressDeniedError is a change of a sandbox's network.allow that the
// policy denies.
type EgressDeniedError struct {
	// Decision is the policy's admission of the sandbox's workflow with
	// the network.allow asked for.
	Decision *policy.Decision
	// Allow is the network.allow asked for.
	Allow []string
	// Deny are the denials the change adds: Decision.Deny without those
	// the workflow as it is now also gets (a policy replaced since the
	// sandbox opened may deny what it already has; that is not the
	// change's doing). The messages are the admission's, word for word.
	Deny []string
}

func (e *EgressDeniedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "policy denied network.allow [%s] (decision %s):", strings.Join(e.Allow, ", "), e.Decision.ID)
	for _, m := range e.Deny {
		b.WriteString("\n  deny: ")
		b.WriteString(m)
	}
	return b.String()
}

// ChangeEgress replaces the sandbox's network.allow while it runs. The
// new list is admitted first, by the same evaluation that admitted the
// sandbox: pol (the policy in force now; nil: the one the sandbox was
// opened under) judges the sandbox's workflow with allow as its step's
// network.allow, on the host's facts, so every rule over a step's
// network (open_egress, require_egress_port, the bandwidth ceiling,
// egress_deny, the internal destinations only egress_internal opens, and
// any team rule) holds at every change as at admission, with the same
// messages. A denial is an *EgressDeniedError and changes nothing. Once
// admitted, the next connection and DNS query are judged by allow,
// together with the decision's egress_deny and egress_internal.
// Connections already open go on. The decision is returned either way
// (nil when the policy failed to evaluate), for the caller's decision
// log. The caller serializes changes to one sandbox.
func (sb *Sandbox) ChangeEgress(ctx context.Context, pol Policy, allow []string) (*policy.Decision, error) {
	if sb.gw == nil {
		return nil, ErrNoEgress
	}
	if pol == nil {
		pol = sb.run.o.Policy
	}
	if pol == nil {
		return nil, ErrNoPolicy
	}
	next := withAllow(sb.plan, allow)
	host := sb.run.o.Host.Policy()
	d, err := pol.Eval(ctx, next, host)
	if err != nil {
		return nil, fmt.Errorf("admit network.allow [%s]: %w", strings.Join(allow, ", "), err)
	}
	if d == nil {
		return nil, errors.New("admission policy gave no decision")
	}
	if !d.Allowed() {
		now, err := pol.Eval(ctx, sb.plan, host)
		if err != nil {
			return d, fmt.Errorf("admit the sandbox's network.allow as it is: %w", err)
		}
		var added []string
		for _, m := range d.Deny {
			if now == nil || !slices.Contains(now.Deny, m) {
				added = append(added, m)
			}
		}
		if len(added) > 0 {
			return d, &EgressDeniedError{Decision: d, Allow: slices.Clone(allow), Deny: added}
		}
	}
	// Entries the proxy cannot enforce ("*", which the default policy
	// denies) are refused here, as refuse does at open.
	rules, err := egress.Operator{Deny: d.EgressDeny, Internal: d.EgressInternal}.Rules(allow)
	if err != nil {
		return d, fmt.Errorf("network.allow: %w", err)
	}
	sb.gw.SetRules(rules)
	sb.plan = next
	return d, nil
}

// withAllow is w with its one step's network.allow replaced by allow.
func withAllow(w *workflow.Workflow, allow []string) *workflow.Workflow {
	c := *w
	c.Steps = slices.Clone(w.Steps)
	c.Steps[0].Network.Allow = slices.Clone(allow)
	return &c
}

// ScratchDir makes a fresh directory of the host's for the sandbox's
// own use (a snapshot being restored), out of the job's reach, removed
// with the sandbox at the latest.
func (sb *Sandbox) ScratchDir() (string, error) {
	return os.MkdirTemp(sb.run.runDir, "scratch-")
}

// Draft is the sandbox's record as it would be if the sandbox ended now
// without Close (the server killed): its step as opened, status error,
// no entries. The server journals it so that a restart can close the
// record of a sandbox that died with the server.
func (sb *Sandbox) Draft() *record.Record {
	rec := *sb.rec
	sr := *sb.sr
	sr.Started = sb.started
	sr.Status, sr.ExitCode = record.StatusError, -1
	sr.Detail = "sandbox ended with its server"
	rec.Steps = []record.Step{sr}
	rec.Sandbox = &record.Sandbox{ID: sb.ID, Ended: "server killed", Entries: []record.Entry{}}
	rec.Status = record.StatusError
	rec.Error = "the server stopped without closing the sandbox (killed or crashed), and the sandbox ended with it; its usage and network log were not kept"
	return &rec
}

// SetOwner makes owner the owner of the sandbox's record (a warm
// sandbox is opened before anyone owns it). Call it before Draft or
// Close, from the goroutine that opened the sandbox or under the lock
// that publishes it.
func (sb *Sandbox) SetOwner(owner string) { sb.rec.Owner = owner }

// Store is the blob store the sandbox's record goes to.
func (sb *Sandbox) Store() *record.Store { return sb.run.o.Store }

// Close stops the sandbox, removes everything it held, and writes its
// record: the step with its usage and network log, and the entries of
// what was done in it. ended says why ("killed", "expired", ...). It runs
// once; later calls return the first result.
func (sb *Sandbox) Close(ctx context.Context, ended string, labels map[string]string, entries []record.Entry) (record.ID, error) {
	sb.closeOnce.Do(func() {
		sb.closeID, sb.closeErr = sb.close(ctx, ended, labels, entries)
	})
	return sb.closeID, sb.closeErr
}

func (sb *Sandbox) close(ctx context.Context, ended string, labels map[string]string, entries []record.Entry) (record.ID, error) {
	var errs []error
	sr := sb.sr
	if sb.Session != nil {
		if u, err := sb.Session.Usage(); err == nil {
			sr.Usage = record.Usage{PeakMemoryBytes: u.PeakMemoryBytes, CPUTimeNs: u.CPUTime.Nanoseconds(),
				PidsPeak: u.PidsPeak, OOMKills: u.OOMKills, ThrottledNs: u.ThrottledTime.Nanoseconds()}
		}
		if err := sb.Session.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	sr.Started, sr.Finished = sb.started, time.Now().UTC()
	sr.Status, sr.ExitCode, sr.Detail = record.StatusSucceeded, 0, "sandbox "+ended
	if err := sb.run.recordEgress(sb.Step, sb.gw, sb.Decision.EgressDeny, sr); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, sb.release())
	rec := sb.rec
	rec.Steps = []record.Step{*sr}
	rec.Sandbox = &record.Sandbox{ID: sb.ID, Labels: labels, Ended: ended, Entries: entries}
	rec.Finished = time.Now().UTC()
	rec.Status = record.StatusSucceeded
	if err := errors.Join(errs...); err != nil {
		rec.Status, rec.Error = record.StatusError, err.Error()
	}
	id, err := sb.run.o.Store.Put(rec)
	if err != nil {
		errs = append(errs, fmt.Errorf("write the sandbox's record: %w", err))
	}
	return id, errors.Join(errs...)
}

// Discard ends a sandbox that was never handed to anyone (a server's warm
// sandbox it no longer wants): its session stops and its directories go,
// and no record is written, since nothing ran in it. A sandbox that was
// used ends with Close. Discard after Close, or Close after Discard, does
// nothing more.
func (sb *Sandbox) Discard(ctx context.Context) error {
	sb.closeOnce.Do(func() {
		var errs []error
		if sb.Session != nil {
			errs = append(errs, sb.Session.Stop(ctx))
		}
		errs = append(errs, sb.release())
		sb.closeErr = errors.Join(errs...)
	})
	return sb.closeErr
}

// release unmounts the workspace and removes the sandbox's directories.
func (sb *Sandbox) release() error {
	return sb.run.workspaces.RemoveRunDir()
}
