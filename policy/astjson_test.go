package policy

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

var jsonSeeds = []string{
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-1.5e3`, `"x"`,
	`{"a": [1, 2, {"b": null}], "c": "d\"e\\u00e9\ud83d\ude00", "n": 12345678901234567890123}`,
	` { "dup": 1, "dup": 2 } `, `[1,]`, `{"a" 1}`, `{"a":1,}`, `"\x01"`, `01`, `-`, `tru`, `"abc`, `[1] 2`,
	"\"\xff\"", `{"k":"v"}` + "\n", `1e100000`, `[1E-100000]`, `{"n": 1e400}`,
}

func FuzzJSONToValue(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	in, err := InputDocument(generated(3), vmHost)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(in)
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := jsonToValue(b)
		if !json.Valid(b) {
			if err == nil {
				t.Fatalf("accepted invalid JSON %q as %v", b, got)
			}
			return
		}
		want, opaErr := ast.ValueFromReader(bytes.NewReader(b))
		if opaErr != nil {
			// Valid JSON that OPA cannot evaluate (1e100000).
			if err == nil {
				t.Fatalf("accepted %q, which OPA refuses (%v), as %v", b, opaErr, got)
			}
			return
		}
		if err != nil {
			t.Fatalf("rejected valid JSON %q: %v", b, err)
		}
		if got.Compare(want) != 0 {
			t.Fatalf("%q:\n got %v\nwant %v", b, got, want)
		}
	})
}

func TestJSONToValueMatchesOPAOnInput(t *testing.T) {
	in, err := InputDocument(generated(100), nsHost)
	if err != nil {
		t.Fatal(err)
	}
	got, err := jsonToValue(in)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ast.ValueFromReader(bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if got.Compare(want) != 0 {
		t.Fatal("jsonToValue and ast.ValueFromReader differ on the input document")
	}
	deep := bytes.Repeat([]byte("["), maxJSONDepth+2)
	if _, err := jsonToValue(deep); err == nil {
		t.Fatal("accepted nesting past maxJSONDepth")
	}
}
