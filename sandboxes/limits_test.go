package sandboxes

import (
	"strings"
	"testing"
)

// TestCheckPathLength: the limits exactly, one byte over each, and a
// message that quotes the start of the path only.
func TestCheckPathLength(t *testing.T) {
	at := strings.Repeat("d/", MaxPathBytes/2-1)
	at += strings.Repeat("f", MaxPathBytes-len(at))
	for _, p := range []string{"", "a", at, strings.Repeat("n", MaxNameBytes), "dir/" + strings.Repeat("é", MaxNameBytes/2)} {
		if err := CheckPathLength(p); err != nil {
			t.Errorf("CheckPathLength(%d bytes): %v", len(p), err)
		}
	}
	for p, msg := range map[string]string{
		at + "f":                                "is 4085 bytes long: the most is 4084 bytes",
		strings.Repeat("n", MaxNameBytes+1):     "has a name of 256 bytes",
		"ok/" + strings.Repeat("é", 200) + "/x": "has a name of 400 bytes",
	} {
		err := CheckPathLength(p)
		if err == nil || CodeOf(err) != CodeBadRequest || !strings.Contains(err.Error(), msg) {
			t.Errorf("CheckPathLength(%d bytes) = %v, want a bad request saying %q", len(p), err, msg)
			continue
		}
		if len(err.Error()) > 200 {
			t.Errorf("the message echoes the path: %s", err)
		}
	}
}
