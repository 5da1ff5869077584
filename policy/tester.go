package policy

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/tester"
)

// TestSummary counts the outcomes of a Test run.
type TestSummary struct {
	Passed, Failed, Errored, Skipped int
}

// Total is the number of test rules run.
func (s TestSummary) Total() int { return s.Passed + s.Failed + s.Errored + s.Skipped }

// OK reports whether every test that ran passed.
func (s TestSummary) OK() bool { return s.Failed == 0 && s.Errored == 0 }

// Test runs the test_* rules of the *_test.rego files in opts.Dirs, with
// OPA's tester, against the same bundle Load would read (the default policy
// and data unless NoDefault, the folders' policies, the data files) and the
// same capabilities. It writes a report in `opa test` style to out (every
// result when verbose, else failures and the totals). Sources that do not
// parse or compile give a *SourceError.
func Test(ctx context.Context, opts Options, out io.Writer, verbose bool) (TestSummary, error) {
	var sum TestSummary
	b, err := readBundle(opts, true)
	if err != nil {
		return sum, err
	}
	if len(b.tests) == 0 {
		return sum, &SourceError{Problems: []string{fmt.Sprintf("no *_test.rego files in %v", opts.Dirs)}}
	}
	caps := capabilities()
	modules, err := parseModules(append(b.sources, b.tests...), caps)
	if err != nil {
		return sum, err
	}
	store := b.store()
	txn, err := store.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		return sum, fmt.Errorf("policy test: open store: %w", err)
	}
	defer store.Abort(ctx, txn)

	compiler := ast.NewCompiler().
		WithCapabilities(caps).
		WithEnablePrintStatements(true).
		WithDefaultRegoVersion(ast.RegoV1)
	runner := tester.NewRunner().
		SetCompiler(compiler).
		SetStore(store).
		SetModules(modules).
		SetDefaultRegoVersion(ast.RegoV1).
		CapturePrintOutput(true).
		RaiseBuiltinErrors(true).
		SetTimeout(10 * time.Second).
		SetParallel(1)
	ch, err := runner.RunTests(ctx, txn)
	if err != nil {
		return sum, sourceError(err)
	}
	counted := make(chan *tester.Result)
	go func() {
		defer close(counted)
		for r := range ch {
			switch {
			case r.Skip:
				sum.Skipped++
			case r.Error != nil:
				sum.Errored++
			case r.Fail:
				sum.Failed++
			default:
				sum.Passed++
			}
			counted <- r
		}
	}()
	rep := tester.PrettyReporter{Output: out, Verbose: verbose, FailureLine: true}
	if err := rep.Report(counted); err != nil {
		return sum, fmt.Errorf("policy test: report: %w", err)
	}
	if sum.Total() == 0 {
		return sum, &SourceError{Problems: []string{fmt.Sprintf("no test_* rules in the *_test.rego files of %v", opts.Dirs)}}
	}
	return sum, nil
}
