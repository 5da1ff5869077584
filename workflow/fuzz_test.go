package workflow

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary bytes to the parser. It must never panic; it
// either returns a workflow whose canonical form and waves are consistent,
// or an *ErrorList with real positions.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/bad/*.yaml")
	examples, _ := filepath.Glob("../examples/*.yaml")
	for _, s := range append(seeds, examples...) {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(base))
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := parse("f.yaml", data)
		if err != nil {
			var list *ErrorList
			if !errors.As(err, &list) || len(list.Errors) == 0 {
				t.Fatalf("error %T %v is not a non-empty *ErrorList", err, err)
			}
			for _, e := range list.Errors {
				if e.Line < 1 || e.Col < 1 || e.Msg == "" {
					t.Fatalf("bad error %+v", e)
				}
			}
			return
		}
		c1, err := w.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		c2, _ := w.Canonical()
		if string(c1) != string(c2) {
			t.Fatal("canonical form is not deterministic")
		}
		n := 0
		for _, wave := range w.Waves() {
			n += len(wave)
		}
		if n != len(w.Steps) {
			t.Fatalf("waves hold %d steps, workflow has %d", n, len(w.Steps))
		}
		if strings.Contains(string(c1), "null") && !strings.Contains(fmt.Sprint(w), "null") {
			t.Fatalf("canonical form has a null: %s", c1)
		}
	})
}
