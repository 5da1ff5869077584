package record

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentsandbox/agentsandbox/fsx/jobfs"
	nt "github.com/agentsandbox/agentsandbox/internal/nartest"
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

// FuzzRestoreNAR: RestoreNAR of any bytes never panics and never writes
// outside its target: it fails leaving nothing behind (no target, no
// temporary, nothing beside it), or it succeeds and the tree it wrote dumps
// back to exactly the bytes it read (restored symlinks are symlinks, the
// executable bit kept, nothing added or lost).
func FuzzRestoreNAR(f *testing.F) {
	outsideSeed := "/tmp/agentsandbox-fuzz-outside"
	for _, n := range []nt.Node{
		nt.File("hello"),
		nt.Exec(""),
		nt.Symlink(outsideSeed),
		nt.Dir(),
		nt.Dir(nt.E("a", nt.File("1")), nt.E("d", nt.Dir(nt.E("b", nt.Exec("2")))), nt.E("l", nt.Symlink("a"))),
		nt.Dir(nt.E("x", nt.Symlink(outsideSeed)), nt.E("x", nt.Dir(nt.E("file", nt.File("pwned"))))),
		nt.Dir(nt.E("a", nt.Dir(nt.E(".", nt.Symlink(outsideSeed))))),
		nt.Dir(nt.E("a", nt.Dir(nt.E("", nt.File("x"))))),
		nt.Dir(nt.E("..", nt.Symlink(outsideSeed))),
		nt.Dir(nt.E("b", nt.File("1")), nt.E("a", nt.File("2"))),
	} {
		f.Add(n.Bytes())
	}
	s, err := OpenStore(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, _, err := s.PutBlob(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		base := t.TempDir()
		for _, p := range []string{"target", "outside"} {
			if err := os.Mkdir(filepath.Join(base, p), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		root, err := jobfs.Open(filepath.Join(base, "target"))
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		err = s.RestoreNAR(NarHash(d), root.Restorer(-1, -1), "out")
		assertEmpty(t, filepath.Join(base, "outside"), "outside")
		entries, _ := os.ReadDir(filepath.Join(base, "target"))
		if err != nil {
			if len(entries) != 0 {
				t.Fatalf("a failed restore (%v) left %d entries", err, len(entries))
			}
			return
		}
		if len(entries) != 1 || entries[0].Name() != "out" {
			t.Fatalf("a restore left %v beside its target", entries)
		}
		var again bytes.Buffer
		if err := root.DumpNAR(&again, "out", &jobfs.Budget{MaxBytes: 1 << 30, MaxEntries: MaxOutputEntries}); err != nil {
			t.Fatalf("dump the restored tree: %v", err)
		}
		if !bytes.Equal(again.Bytes(), b) {
			t.Fatalf("the restored tree dumps to other bytes:\n%q\nrestored from\n%q", again.Bytes(), b)
		}
	})
}
