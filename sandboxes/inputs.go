package sandboxes

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/inputs"
	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Who wrote a workflow decides what its inputs may be. The operator's
// own workflows (files in the template directory, run by name or used as
// sandbox templates) are fetched as apply fetches them, their file
// inputs beneath the template directory. A workflow an API caller sent
// inline is fetched under the policy's api_inputs (policy.APIInputs,
// inputs.Confinement): files beneath the template directory, git over
// http(s) only, public addresses only (after DNS, on every connection,
// redirects too), nothing served from the store by its digest but what
// the caller owns (owned.go). Its
// inputs are judged before the run starts, and what is refused is a 403
// naming the input and the policy key.

// fetchFrom is the engine's FetchFunc of f: file inputs resolve in the
// template directory, and a server without one refuses them.
func (m *manager) fetchFrom(f *inputs.Fetcher) engine.FetchFunc {
	return func(ctx context.Context, in workflow.Input, dir string) (record.Input, string, error) {
		if in.Kind == workflow.InputFile && m.o.TemplateDir == "" {
			return record.Input{}, "", fmt.Errorf("input %q: this server has no template directory to fetch file inputs from; start it with --templates DIR", in.Name)
		}
		got, err := f.Fetch(ctx, in, m.o.TemplateDir, filepath.Join(dir, "content"))
		if err != nil {
			return record.Input{}, "", err
		}
		return got.Input, got.Path, nil
	}
}

// apiFetch is the FetchFunc of an inline workflow w under pol's
// api_inputs, once every input of w passed the checks that need no
// network: nil when w has no inputs. owns says which stored content the
// caller may be served by its pin (all of it with api_inputs.from_store).
func (m *manager) apiFetch(pol *policy.Engine, w *workflow.Workflow, owns func(record.Digest) bool) (engine.FetchFunc, error) {
	if len(w.Inputs) == 0 {
		return nil, nil
	}
	if m.o.Inputs == nil {
		return nil, Errorf(CodeUnsupport, "input %q: this server fetches no inputs for workflows sent inline", w.Inputs[0].Name)
	}
	settings := policy.DefaultAPIInputs()
	if pol != nil {
		settings = pol.APIInputs()
	}
	conf, err := inputs.NewConfinement(settings.GitSchemes, settings.FromStore, settings.NetworkAllow, settings.EgressDeny)
	if err != nil {
		return nil, Errorf(CodeInternal, "the policy's api_inputs: %w", err)
	}
	if conf.Owns == nil {
		conf.Owns = owns
	}
	for _, in := range w.Inputs {
		if in.Kind == workflow.InputFile && m.o.TemplateDir == "" {
			return nil, Errorf(CodeBadRequest, "input %q: a file input of an inline workflow is read from the server's template directory, and this server has none (serve --templates DIR); use a git or http input", in.Name)
		}
		if err := conf.Check(in); err != nil {
			return nil, &Error{Code: CodeDenied, Message: err.Error(), Err: err}
		}
	}
	f := *m.o.Inputs
	f.Confine, f.AllowOutside = conf, false
	return m.fetchFrom(&f), nil
}

// apiRunError is the error of an inline run that stopped on an input: a
// refusal is a 403, a wrong pin or a missing file a 400, both naming the
// record the run left; nil for any other error (the run's answer then
// carries it, as before).
func apiRunError(err error, rec record.ID) error {
	var code Code
	switch {
	case errors.Is(err, inputs.ErrRefused), errors.Is(err, inputs.ErrOutside):
		code = CodeDenied
	case errors.Is(err, inputs.ErrChecksum), errors.Is(err, inputs.ErrNoSource):
		code = CodeBadRequest
	default:
		return nil
	}
	msg := err.Error()
	if !rec.IsZero() {
		msg += fmt.Sprintf(" (the run's record: %s)", rec)
	}
	return &Error{Code: code, Message: msg, Err: err}
}
