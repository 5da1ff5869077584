package record

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nix-community/go-nix/pkg/nar"

	"github.com/agentsandbox/agentsandbox/fsx/jobfs"
)

func BenchmarkEncode(b *testing.B) {
	r := sampleRecord(false)
	for b.Loop() {
		if _, err := Encode(r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode includes the canonical re-encoding check.
func BenchmarkDecode(b *testing.B) {
	enc, err := Encode(sampleRecord(false))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		if _, err := Decode(enc); err != nil {
			b.Fatal(err)
		}
	}
}

func benchTree(b *testing.B) (string, int64) {
	dir := b.TempDir()
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	var total int64
	for i := range 64 {
		p := filepath.Join(dir, "d", string(rune('a'+i%26))+string(rune('a'+i/26)))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		chunk[0] = byte(i)
		if err := os.WriteFile(p, chunk, 0o644); err != nil {
			b.Fatal(err)
		}
		total += int64(len(chunk))
	}
	return dir, total
}

// BenchmarkNARHashBaseline is nar.DumpPath into sha256 alone: the floor
// PutNAR is compared with.
func BenchmarkNARHashBaseline(b *testing.B) {
	dir, total := benchTree(b)
	b.SetBytes(total)
	for b.Loop() {
		h := sha256.New()
		if err := nar.DumpPath(h, dir); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPutNAR hashes and stores (temp file, fsync, rename) a 64 MiB
// tree; after the first round the blob exists and is deduplicated.
func BenchmarkPutNAR(b *testing.B) {
	dir, total := benchTree(b)
	s, err := OpenStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(total)
	for b.Loop() {
		if _, _, err := s.PutNAR(dir); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyBlob(b *testing.B) {
	dir, total := benchTree(b)
	s, err := OpenStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	h, _, err := s.PutNAR(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(total)
	for b.Loop() {
		if err := s.VerifyBlob(h.Blob()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPutRecord(b *testing.B) {
	s, err := OpenStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	r := sampleRecord(false)
	for i := 0; b.Loop(); i++ {
		r.Steps[0].ExitCode = i // a new record each round
		if _, err := s.Put(r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunWrites is what one run of a one-step workflow stores: three
// new small blobs (job.json, stdout, the workflow of a new run), one that
// is already there (an empty stderr), and the record that names them.
func BenchmarkRunWrites(b *testing.B) {
	s, err := OpenStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	r := sampleRecord(false)
	for i := 0; b.Loop(); i++ {
		for _, c := range []string{fmt.Sprintf("job %d", i), fmt.Sprintf("log %d", i), fmt.Sprintf("workflow %d", i), ""} {
			if _, _, err := s.PutBlob(strings.NewReader(c)); err != nil {
				b.Fatal(err)
			}
		}
		r.Steps[0].ExitCode = i
		if _, err := s.Put(r); err != nil {
			b.Fatal(err)
		}
	}
}

// manyFiles is a tree of 4,096 small files in 64 directories three deep:
// what a restore pays per entry.
func manyFiles(b *testing.B) string {
	dir := b.TempDir()
	for i := range 4096 {
		p := filepath.Join(dir, "a", fmt.Sprintf("d%02d", i%64), "e", fmt.Sprintf("f%04d", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

// BenchmarkRestoreNAR restores a 64 MiB tree of 64 files, and a tree of
// 4,096 small files, through jobfs.Restorer (openat2 per entry).
func BenchmarkRestoreNAR(b *testing.B) {
	big, _ := benchTree(b)
	for name, dir := range map[string]string{"64x1MiB": big, "4096-small": manyFiles(b)} {
		b.Run(name, func(b *testing.B) {
			s, err := OpenStore(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			h, _, err := s.PutNAR(dir)
			if err != nil {
				b.Fatal(err)
			}
			dst, err := jobfs.OpenRestorer(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer dst.Close()
			i := 0
			for b.Loop() {
				i++
				if err := s.RestoreNAR(h, dst, fmt.Sprintf("out%d", i)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkKeptBlobs is the mark of a snapshot collection (KeptMark): every record
// of a store of 200 sandbox records of 50 entries each (an exec with its
// two logs, alternating with a file put), and its refs.
func BenchmarkKeptBlobs(b *testing.B) {
	s, err := OpenStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for i := range 200 {
		var entries []Entry
		for j := range 50 {
			d, _, _ := s.PutBlob(strings.NewReader(fmt.Sprintf("output %d %d", i, j)))
			a := Action{Kind: "exec", Stdout: &d, Stderr: &d}
			if j%2 == 1 {
				a = Action{Kind: "file_put", Path: "f", File: &d}
			}
			raw, _ := json.Marshal(a)
			ad, _, _ := s.PutBlob(bytes.NewReader(raw))
			entries = append(entries, Entry{Seq: j + 1, Kind: a.Kind, Digest: ad})
		}
		if _, err := s.Put(&Record{Version: Version, Status: StatusSucceeded, Sandbox: &Sandbox{ID: fmt.Sprint("sb", i), Entries: entries}}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("all", func(b *testing.B) {
		for b.Loop() {
			var m KeptMark
			if err := m.Update(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A server's later collections read only the records written since.
	b.Run("again", func(b *testing.B) {
		var m KeptMark
		m.Update(s)
		for b.Loop() {
			if err := m.Update(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
