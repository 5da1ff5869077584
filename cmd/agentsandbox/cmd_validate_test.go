package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const badWorkflow = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: bad
steps:
  - name: Bad_Name
    run: ""
    reources: {}
`

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Execute(context.Background(), Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}, args)
	return code, out.String(), errb.String()
}

func TestValidateExamples(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.yaml")
	if len(files) < 3 {
		t.Fatalf("want the three examples, found %v", files)
	}
	var out bytes.Buffer
	if err := runValidate(context.Background(), Stdio{Out: &out, Err: &out}, validateOptions{}, files); err != nil {
		t.Fatalf("runValidate: %v\n%s", err, out.String())
	}
	for _, f := range files {
		if !strings.Contains(out.String(), f+": ok\n") {
			t.Errorf("output lacks %q:\n%s", f+": ok", out.String())
		}
	}
	if code, _, _ := run(t, append([]string{"validate"}, files...)...); code != ExitOK {
		t.Errorf("exit status %d, want 0", code)
	}
}

func TestValidateInvalid(t *testing.T) {
	bad := writeFile(t, "bad.yaml", badWorkflow)
	good := "../../examples/hello.yaml"
	code, stdout, stderr := run(t, "validate", good, bad)
	if code != ExitInvalid {
		t.Errorf("exit status %d, want %d", code, ExitInvalid)
	}
	if stdout != good+": ok\n" {
		t.Errorf("stdout %q", stdout)
	}
	want := bad + `:5:11: step name "Bad_Name" cannot be a host name: use lowercase letters, digits and '-', start with a letter, end with a letter or digit, at most 32 characters
` + bad + `:6:10: steps[0] has an empty run; give it a shell script
` + bad + `:7:5: unknown key "reources" in steps[0] (did you mean "resources"?)
`
	if stderr != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", stderr, want)
	}
}

func TestValidateMissingFileAndUsage(t *testing.T) {
	code, _, stderr := run(t, "validate", filepath.Join(t.TempDir(), "nope.yaml"))
	if code != ExitInvalid || !strings.Contains(stderr, "no such file") {
		t.Errorf("missing file: exit %d, stderr %q", code, stderr)
	}
	if code, _, _ := run(t, "validate"); code != ExitInvalid {
		t.Errorf("no arguments: exit %d, want %d", code, ExitInvalid)
	}
}

// TestValidateAliasBomb: a workflow of a few hundred bytes whose nested
// merge keys would repeat a value 9^8 times is refused at once, at the
// alias that goes over the budget (it took validate 24 s at depth 8).
func TestValidateAliasBomb(t *testing.T) {
	start := time.Now()
	code, stdout, stderr := run(t, "validate", "../../workflow/testdata/bad/alias-bomb.yaml")
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("validate took %v", took)
	}
	want := "../../workflow/testdata/bad/alias-bomb.yaml:10:32: with this alias *m4, YAML aliases and merge keys (<<) repeat more than 100000 nodes"
	if code != ExitInvalid || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant %q", code, stdout, stderr, want)
	}
}
