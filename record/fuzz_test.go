package record

import (
	"bytes"
	"testing"
)

// FuzzDecode: Decode never panics, and whatever it accepts encodes back to
// exactly the same bytes (one record, one spelling, one id).
func FuzzDecode(f *testing.F) {
	good, err := Encode(sampleRecord(false))
	if err != nil {
		f.Fatal(err)
	}
	empty, err := Encode(&Record{Version: Version})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(empty)
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":1.0}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Encode(r)
		if err != nil {
			t.Fatalf("Decode accepted what Encode cannot write: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("round trip changed bytes:\n%q\n%q", b, again)
		}
		if _, err := Decode(again); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
	})
}
