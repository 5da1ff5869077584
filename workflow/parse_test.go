package workflow

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/bad/*.golden from the parser's output")

// TestBadCorpus parses every testdata/bad/*.yaml and compares the full
// error list with the .golden file next to it.
func TestBadCorpus(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no files in testdata/bad")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			name := filepath.ToSlash(f)
			w, err := Parse(name, data)
			if err == nil {
				t.Fatalf("Parse accepted a bad workflow: %+v", w)
			}
			var list *ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error is %T, want *ErrorList: %v", err, err)
			}
			got := err.Error() + "\n"
			for _, e := range list.Errors {
				if e.File != name || e.Line < 1 || e.Col < 1 {
					t.Errorf("bad position in %+v", e)
				}
				if strings.Contains(e.Msg, "yaml.Node") || strings.Contains(e.Msg, "*workflow") || strings.Contains(e.Msg, "goroutine") {
					t.Errorf("message leaks Go internals: %s", e.Msg)
				}
			}
			golden := strings.TrimSuffix(f, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./workflow -run TestBadCorpus -update)", err)
			}
			if got != string(want) {
				t.Errorf("errors differ from %s (rerun with -update if the change is intended)\ngot:\n%s\nwant:\n%s", golden, got, want)
			}
		})
	}
}

func TestExamplesValid(t *testing.T) {
	files, err := filepath.Glob("../examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		if _, _, err := ParseFile(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
