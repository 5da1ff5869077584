package workflow

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const budgetHeader = "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: budget\nsteps: [{name: a, run: echo}]\n"

// aliasList is a valid workflow whose x- key lists n aliases of a list of
// size-1 scalars: each alias repeats exactly size nodes.
func aliasList(size, n int) string {
	items := strings.TrimSuffix(strings.Repeat("1, ", size-1), ", ")
	return budgetHeader + "x-a: &a [" + items + "]\nx-b: [" + strings.TrimSuffix(strings.Repeat("*a, ", n), ", ") + "]\n"
}

func parseErrors(t *testing.T, data string) []*Error {
	t.Helper()
	_, err := Parse("b.yaml", []byte(data))
	if err == nil {
		return nil
	}
	var list *ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("error %T %v", err, err)
	}
	return list.Errors
}

// TestAliasBudget: aliases may repeat MaxAliasNodes nodes in all, and
// the alias that takes them one past it is the error's position, even in
// a part of the file the workflow ignores.
func TestAliasBudget(t *testing.T) {
	if errs := parseErrors(t, aliasList(1000, MaxAliasNodes/1000)); errs != nil {
		t.Fatalf("exactly %d repeated nodes: %v", MaxAliasNodes, errs)
	}
	over := aliasList(1000, MaxAliasNodes/1000+1)
	errs := parseErrors(t, over)
	if len(errs) != 1 {
		t.Fatalf("one alias over the budget: %v", errs)
	}
	last := strings.LastIndex(over, "*a")
	line := strings.Count(over[:last], "\n") + 1
	col := last - strings.LastIndex(over[:last], "\n")
	if e := errs[0]; e.Line != line || e.Col != col || !strings.Contains(e.Msg, fmt.Sprintf("repeat more than %d nodes", MaxAliasNodes)) || !strings.Contains(e.Msg, "*a") {
		t.Errorf("got %v, want the last alias at %d:%d", e, line, col)
	}
}

// TestAliasBombIsCheap: a file of a few hundred bytes whose nested merge
// keys would make 9^8 pairs (testdata/bad/alias-bomb.yaml; before the
// budget it took the parser seconds per level, 24 s at depth 8) is
// refused at once, as is an anchor that merges itself. The bound is
// loose (a loaded machine); BenchmarkParseAliasBomb measures it.
func TestAliasBombIsCheap(t *testing.T) {
	for _, f := range []string{"alias-bomb.yaml", "alias-cycle.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", "bad", f))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		errs := parseErrors(t, string(data))
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s: %v to refuse", f, took)
		}
		if len(errs) != 1 {
			t.Errorf("%s: %v", f, errs)
		}
	}
}

func BenchmarkParseAliasBomb(b *testing.B) {
	data, err := os.ReadFile("testdata/bad/alias-bomb.yaml")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Parse("bomb.yaml", data); err == nil {
			b.Fatal("accepted")
		}
	}
}

// TestAnchorsWithinBudget: a thousand steps that merge their defaults
// from one anchor are well within the budget and get them.
func TestAnchorsWithinBudget(t *testing.T) {
	var b strings.Builder
	b.WriteString("apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: anchors\n")
	b.WriteString("x-step: &step\n  run: echo\n  env: {A: a, B: b}\n  resources: {vcpu: 2, memory: 1GiB, timeout: 10m}\nsteps:\n")
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&b, "  - {<<: *step, name: s%d}\n", i)
	}
	w, err := Parse("anchors.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Steps) != 1000 || w.Steps[999].Resources.VCPU != 2 || w.Steps[999].Env["B"] != "b" {
		t.Errorf("steps %d, last %+v", len(w.Steps), w.Steps[len(w.Steps)-1])
	}
}

// TestFileSizeLimit: a workflow over MaxFileSize is refused before it is
// decoded, also by ParseFile, which reads no more than one byte past it.
func TestFileSizeLimit(t *testing.T) {
	big := budgetHeader + "x-pad: \"" + strings.Repeat("a", MaxFileSize) + "\"\n"
	errs := parseErrors(t, big)
	if len(errs) != 1 || errs[0].Line != 1 || errs[0].Col != 1 || !strings.Contains(errs[0].Msg, "over the 4MiB a workflow may be") {
		t.Errorf("Parse: %v", errs)
	}
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	_, data, err := ParseFile(path)
	if err == nil || !strings.Contains(err.Error(), "big.yaml:1:1: the file is 4194305 bytes") || len(data) != MaxFileSize+1 {
		t.Errorf("ParseFile: %d bytes, %v", len(data), err)
	}
}

// TestManyProblemsAreCapped: thousands of mistakes (each with a
// suggestion that compares a name with every step's) are refused about as
// fast as a few: MaxErrors are reported, then one line says more were
// left out. Before the cap a file of 12,000 such steps took a minute.
func TestManyProblemsAreCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString("apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: many\nsteps:\n")
	for i := 0; i < 5000; i++ {
		fmt.Fprintf(&b, "- {name: s%d, run: b, needs: [x%d]}\n", i, i)
	}
	start := time.Now()
	errs := parseErrors(t, b.String())
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("%v to refuse", took)
	}
	if len(errs) != MaxErrors+1 {
		t.Fatalf("%d errors, want %d and one saying more were left out", len(errs), MaxErrors+1)
	}
	if e := errs[0]; e.Line != 5 || e.Msg != `step "s0" needs "x0", which is not a step (did you mean "s0"?)` {
		t.Errorf("first: %v", e)
	}
	if e := errs[MaxErrors]; e.Line != 5+MaxErrors || !strings.HasPrefix(e.Msg, "more problems from here on are not shown") {
		t.Errorf("last: %v", e)
	}
}

// TestNestedDests: each input whose dest lies in another's is reported
// once, naming the nearest, however deep they nest (this used to compare
// every pair and report every enclosing dest: cubic in the inputs, a
// minute for 700 of them).
func TestNestedDests(t *testing.T) {
	small := budgetHeader + `inputs:
  top: {source: f, dest: a}
  sibling: {source: f, dest: a-b}
  mid: {source: f, dest: a/b}
  deep: {source: f, dest: a/b/c}
  side: {source: f, dest: a/c}
`
	var got []string
	for _, e := range parseErrors(t, small) {
		got = append(got, fmt.Sprintf("%d: %s", e.Line, e.Msg))
	}
	want := []string{
		`8: input "mid" has dest "a/b" inside dest "a" of input "top"`,
		`9: input "deep" has dest "a/b/c" inside dest "a/b" of input "mid"`,
		`10: input "side" has dest "a/c" inside dest "a" of input "top"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	var b strings.Builder
	b.WriteString(budgetHeader + "inputs:\n")
	d := "a"
	for i := 0; i < 700; i++ {
		fmt.Fprintf(&b, "  i%03d: {source: f, dest: %s}\n", i, d)
		d += "/a"
	}
	start := time.Now()
	errs := parseErrors(t, b.String())
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("%v to refuse", took)
	}
	if len(errs) != MaxErrors+1 || errs[1].Msg != `input "i002" has dest "a/a/a" inside dest "a/a" of input "i001"` {
		t.Fatalf("%d errors: %v", len(errs), errs[:2])
	}
}
