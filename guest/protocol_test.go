package guest

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseResult: result.json is written by the job's side (in a VM, by
// anything in the guest), so its parser must never panic, must accept
// only this protocol's version, and what it accepts must survive a round
// trip through the host's own encoding. (Its size is bounded before it gets
// here, by ReadResult.)
func FuzzParseResult(f *testing.F) {
	for _, s := range []string{
		`{"version":1,"step":"s","exitCode":0}`,
		`{"version":1,"exitCode":3,"signal":"SIGKILL","timedOut":true,"rusage":{"userMs":1}}`,
		`{"version":2}`,
		`{"version":1}{"version":1}`,
		`{"version":1,"extra":true}`,
		`[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := ParseResult(b)
		if err != nil {
			return
		}
		if res.Version != ProtocolVersion {
			t.Fatalf("accepted version %d", res.Version)
		}
		again, err := json.Marshal(res)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", res, err)
		}
		back, err := ParseResult(again)
		if err != nil || !reflect.DeepEqual(back, res) {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", again, back, err, res)
		}
	})
}

func TestParseResultStrict(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"version":1,"exitCode":0,"bogus":1}`, "unknown field"},
		{`{"version":1}{"version":1}`, "more than one JSON value"},
		{`{"version":9}`, "protocol version 9"},
		{`not json`, "decode result"},
	} {
		if _, err := ParseResult([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseResult(%q) = %v, want an error with %q", tc.in, err, tc.want)
		}
	}
	if r, err := ParseResult([]byte(`{"version":1,"exitCode":7}`)); err != nil || r.ExitCode != 7 {
		t.Errorf("a plain result: %+v, %v", r, err)
	}
}
