package record

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// TestSandboxRecordVerify: a sandbox's record names each action's blob,
// and verify checks the actions and the blobs they name (an exec's
// output, a written file).
func TestSandboxRecordVerify(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	put := func(b []byte) Digest {
		d, _, err := s.PutBlob(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	out, file := put([]byte("hi\n")), put([]byte("data"))
	zero := 0
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var entries []Entry
	for i, a := range []Action{
		{Kind: "exec", Time: at, Command: []string{"echo", "hi"}, EnvNames: []string{"PATH"}, ExitCode: &zero, Stdout: &out, Stderr: &out},
		{Kind: "file_put", Time: at, Path: "data.txt", File: &file, Size: 4},
	} {
		b, _ := json.Marshal(a)
		entries = append(entries, Entry{Seq: i + 1, Time: at, Kind: a.Kind, Digest: put(b), Summary: a.Kind})
	}
	r := &Record{Version: Version, Started: at, Finished: at, Status: StatusSucceeded,
		Sandbox: &Sandbox{ID: "sb1", Ended: "killed", Entries: entries}}
	id, err := s.Put(r)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := s.Verify(id); err != nil || len(p) != 0 {
		t.Fatalf("verify: %v %v", p, err)
	}
	got, err := s.Get(id)
	if err != nil || got.Sandbox == nil || len(got.Sandbox.Entries) != 2 {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if err := os.WriteFile(s.BlobPath(file), []byte("DATA"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := s.Verify(id)
	if err != nil || len(p) != 1 || !strings.Contains(p[0].What, "sandbox entry 2 (file_put) file") {
		t.Fatalf("verify after tampering with the written file's blob: %v %v", p, err)
	}
}
